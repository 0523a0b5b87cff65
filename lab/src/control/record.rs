//! What the controller-driven run saw of the seeds' control planes, for the report: every
//! object the controllers wrote (as the stand-ins saw it change), every condition change of
//! both migrations, the Lease holders, the API servers' answers to invalid migrations, and the
//! breaches of the etcd-druid contract.

use crate::report::{Control, Event};

/// The control planes' part of the record.
#[derive(Debug, Default)]
pub struct ControlRecord {
    /// What the controllers wrote, as the stand-ins saw it (the report's object list).
    pub written: Vec<Event>,
    /// Every condition change of both migrations (the condition timeline).
    pub timeline: Vec<Event>,
    /// Invalid `EtcdMigration`s the API servers refused, with their answers.
    pub refused: Vec<String>,
    /// Leader changes of the controllers' Leases.
    pub leases: Vec<Event>,
    /// Breaches of the etcd-druid contract the stand-in saw (the report's violations).
    pub druid_violations: Vec<String>,
}

impl ControlRecord {
    /// The report's section, `real` saying what ran for real.
    pub fn to_report(&self, real: String) -> Control {
        Control {
            real,
            conditions: self.timeline.clone(),
            objects: self.written.clone(),
            leases: self.leases.clone(),
            refused: self.refused.clone(),
        }
    }
}
