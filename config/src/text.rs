//! Values written as a string with a syntax of their own (an SNI pattern, an endpoint, a CIDR,
//! a duration), deserialised by parsing the text where the reader has it, without copying it
//! into a `String` first: a seed's routes file holds tens of thousands of them.

use serde::de::{self, Deserializer, Visitor};
use std::fmt;
use std::marker::PhantomData;

/// Deserialises a `T` from a string with `parse`; `expecting` says what the string should be.
pub(crate) fn parse_str<'de, D: Deserializer<'de>, T>(
    d: D,
    expecting: &'static str,
    parse: fn(&str) -> Result<T, String>,
) -> Result<T, D::Error> {
    d.deserialize_str(Text {
        expecting,
        parse,
        value: PhantomData,
    })
}

struct Text<T> {
    expecting: &'static str,
    parse: fn(&str) -> Result<T, String>,
    value: PhantomData<T>,
}

impl<T> Visitor<'_> for Text<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.expecting)
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<T, E> {
        (self.parse)(s).map_err(E::custom)
    }
}
