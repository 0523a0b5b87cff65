//! Support shared by the chart and monitoring tests.

pub mod chart;
