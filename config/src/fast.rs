//! The fast path of loading: text into a position-free tree and serde from there, without
//! `marked-yaml`'s spans, linked hash maps and `serde_path_to_error` paths.
//!
//! Why: a reload of a 10k-route file spent most of its time building the marked tree, which
//! only an *invalid* file needs (for file:line:col and the field path). So the loader tries
//! this path first and, whenever it fails for any reason or validation finds a problem,
//! parses again the slow way, which produces every error with its position.
//!
//! The tree comes from the first of two tiers that answers:
//! 1. [`scan`], a hand-written scanner for the subset of YAML that configuration files are
//!    written in (block mappings and sequences, one-line flow collections and scalars,
//!    comments). It exists because yaml-rust2's event parser alone took ~20 ms of a 10k-route
//!    reload (~25 MB/s); the scanner reads that file in ~2 ms. It returns exactly the tree
//!    that tier 2 would build from the same text, or gives up.
//! 2. [`load`], yaml-rust2's events into the tree, for any other YAML.
//!
//! When both give up, the marked path decides alone.
//!
//! The invariant that makes this safe: this path either returns exactly the value the marked
//! path would return, or nothing. It mirrors `marked-yaml`'s deserialiser (every scalar is
//! text, numbers and booleans are parsed from it, an empty scalar is an empty map/sequence/
//! unit, options are always `Some`) and gives up on everything it does not mirror: anchors,
//! aliases, tags, non-scalar or duplicate keys, several documents, a non-mapping top level,
//! and any serde error. Giving up costs only time. The scanner keeps the invariant by
//! building tier 2's tree exactly (`scan_tests` checks it against `load`, `fast_differential`
//! checks the whole path against marked-yaml).

use serde::de::{self, DeserializeOwned, IntoDeserializer, Visitor};
use std::borrow::Cow;
use std::fmt;
use yaml_rust2::parser::{Event, Parser};

mod scan;
#[cfg(test)]
mod scan_tests;

/// A parsed node without positions. Scalars borrow from the text where they can (the
/// scanner's plain and quoted scalars); yaml-rust2's events own theirs.
#[derive(Debug, PartialEq)]
enum Value<'a> {
    Scalar(Cow<'a, str>),
    Seq(Vec<Value<'a>>),
    Map(Vec<(Cow<'a, str>, Value<'a>)>),
}

/// The value of `text`, or `None` when only the marked path can answer.
pub(crate) fn parse<T: DeserializeOwned>(text: &str) -> Option<T> {
    let root = if text.trim().is_empty() {
        Value::Map(Vec::new())
    } else {
        scan::scan(text).or_else(|| load(text))?
    };
    T::deserialize(&root).ok()
}

enum Frame {
    Seq(Vec<Value<'static>>),
    Map(
        Vec<(Cow<'static, str>, Value<'static>)>,
        Option<Cow<'static, str>>,
    ),
}

/// Maps with more keys than this are handed to the marked path rather than checked for
/// duplicate keys one by one (no map of the schemas has more than a dozen fields).
const MAX_KEYS: usize = 64;

fn load(text: &str) -> Option<Value<'static>> {
    let mut parser = Parser::new_from_str(text);
    let mut stack: Vec<Frame> = Vec::new();
    let mut root = None;
    loop {
        let (event, _) = parser.next_token().ok()?;
        let done = match event {
            Event::StreamEnd => break,
            Event::StreamStart | Event::DocumentStart | Event::DocumentEnd | Event::Nothing => {
                continue
            }
            Event::Alias(_) => return None,
            Event::MappingStart(anchor, tag) | Event::SequenceStart(anchor, tag)
                if anchor != 0 || tag.is_some() =>
            {
                return None
            }
            Event::MappingStart(..) => {
                if matches!(stack.last(), Some(Frame::Map(_, None))) {
                    return None; // a mapping as a key
                }
                stack.push(Frame::Map(Vec::new(), None));
                continue;
            }
            Event::SequenceStart(..) => {
                if matches!(stack.last(), Some(Frame::Map(_, None))) {
                    return None; // a sequence as a key
                }
                stack.push(Frame::Seq(Vec::new()));
                continue;
            }
            Event::MappingEnd | Event::SequenceEnd => match stack.pop()? {
                Frame::Seq(items) => Value::Seq(items),
                Frame::Map(entries, None) => Value::Map(entries),
                Frame::Map(_, Some(_)) => return None,
            },
            Event::Scalar(text, _, anchor, tag) => {
                if anchor != 0 || tag.is_some() {
                    return None;
                }
                Value::Scalar(Cow::Owned(text))
            }
        };
        match stack.last_mut() {
            None => {
                // A second document, or a top level that is not a mapping.
                if root.is_some() || !matches!(done, Value::Map(_)) {
                    return None;
                }
                root = Some(done);
            }
            Some(Frame::Seq(items)) => items.push(done),
            Some(Frame::Map(_, key @ None)) => match done {
                Value::Scalar(k) => *key = Some(k),
                _ => return None,
            },
            Some(Frame::Map(entries, key @ Some(_))) => {
                let k = key.take()?;
                if entries.len() >= MAX_KEYS || entries.iter().any(|(e, _)| *e == k) {
                    return None;
                }
                entries.push((k, done));
            }
        }
    }
    Some(root.unwrap_or(Value::Map(Vec::new())))
}

/// For the fuzz target `fuzz/fuzz_targets/config_scan.rs`: false if the scanner returns a
/// tree that yaml-rust2 does not build from the same text.
#[cfg(feature = "fuzzing")]
pub fn scan_agrees_with_yaml_rust2(text: &str) -> bool {
    match scan::scan(text) {
        Some(fast) => load(text).is_some_and(|slow| slow == fast),
        None => true,
    }
}

/// Never shown: any error sends the file down the marked path.
#[derive(Debug)]
struct GiveUp;

impl fmt::Display for GiveUp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("not on the fast path")
    }
}

impl std::error::Error for GiveUp {}

impl de::Error for GiveUp {
    fn custom<M: fmt::Display>(_: M) -> Self {
        GiveUp
    }
}

macro_rules! number {
    ($($method:ident $visit:ident $ty:ty),*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, GiveUp> {
            match self {
                Value::Scalar(s) => visitor.$visit(s.parse::<$ty>().map_err(|_| GiveUp)?),
                _ => Err(GiveUp),
            }
        }
    )*};
}

impl<'de, 'a> de::Deserializer<'de> for &'de Value<'a> {
    type Error = GiveUp;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, GiveUp> {
        match self {
            Value::Scalar(s) => visitor.visit_str(s),
            Value::Seq(items) => visitor.visit_seq(de::value::SeqDeserializer::new(items.iter())),
            Value::Map(entries) => visitor.visit_map(de::value::MapDeserializer::new(
                entries.iter().map(|(k, v)| (Key(k.as_ref()), v)),
            )),
        }
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, GiveUp> {
        match self {
            Value::Scalar(s) => match &**s {
                "true" | "True" | "TRUE" => visitor.visit_bool(true),
                "false" | "False" | "FALSE" => visitor.visit_bool(false),
                _ => Err(GiveUp),
            },
            _ => Err(GiveUp),
        }
    }

    number!(
        deserialize_u8 visit_u8 u8, deserialize_u16 visit_u16 u16,
        deserialize_u32 visit_u32 u32, deserialize_u64 visit_u64 u64,
        deserialize_u128 visit_u128 u128, deserialize_i8 visit_i8 i8,
        deserialize_i16 visit_i16 i16, deserialize_i32 visit_i32 i32,
        deserialize_i64 visit_i64 i64, deserialize_i128 visit_i128 i128,
        deserialize_f32 visit_f32 f32, deserialize_f64 visit_f64 f64
    );

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, GiveUp> {
        // As in marked-yaml: a present field is never None; `null` is text.
        visitor.visit_some(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, GiveUp> {
        match self {
            Value::Scalar(s) => visitor.visit_enum((&**s).into_deserializer()),
            _ => Err(GiveUp),
        }
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, GiveUp> {
        match self {
            Value::Scalar(s) if s.is_empty() => visitor.visit_map(empty_map()),
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, GiveUp> {
        self.deserialize_map(visitor)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, GiveUp> {
        match self {
            Value::Scalar(s) if s.is_empty() => {
                visitor.visit_seq(de::value::SeqDeserializer::new(std::iter::empty::<
                    &Value<'a>,
                >()))
            }
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, GiveUp> {
        match self {
            Value::Scalar(s) if s.is_empty() => visitor.visit_unit(),
            _ => self.deserialize_any(visitor),
        }
    }

    serde::forward_to_deserialize_any! {
        char str string bytes byte_buf tuple unit_struct newtype_struct tuple_struct
        identifier ignored_any
    }
}

fn empty_map<'de, 'a>(
) -> de::value::MapDeserializer<'de, std::iter::Empty<(Key<'de>, &'de Value<'a>)>, GiveUp> {
    de::value::MapDeserializer::new(std::iter::empty())
}

impl<'de, 'a> IntoDeserializer<'de, GiveUp> for &'de Value<'a> {
    type Deserializer = Self;
    fn into_deserializer(self) -> Self {
        self
    }
}

/// A mapping key: always a scalar, deserialised as text (field names).
struct Key<'a>(&'a str);

impl<'de> IntoDeserializer<'de, GiveUp> for Key<'de> {
    type Deserializer = de::value::BorrowedStrDeserializer<'de, GiveUp>;
    fn into_deserializer(self) -> Self::Deserializer {
        de::value::BorrowedStrDeserializer::new(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ProxyConfig;

    /// What the fast path refuses, the marked path decides.
    #[test]
    fn gives_up_on_what_it_does_not_mirror() {
        for text in [
            "a: &x 1\nb: *x\n",
            "listeners: !!seq []\n",
            "? [a]\n: 1\n",
            "drain_delay: 5s\ndrain_delay: 6s\n",
            "- a\n",
            "max_connections: 0x10\n",
            "max_connections: null\n",
            "x: 1\n",
        ] {
            assert!(parse::<ProxyConfig>(text).is_none(), "{text:?}");
        }
    }

    /// Both paths agree on the values they both accept.
    #[test]
    fn agrees_with_the_marked_path() {
        let text = "\
admin: { address: \"127.0.0.1:0\" }
drain_delay: 1s
max_connections: \"7\"
listeners:
  - name: a
    address: 0.0.0.0:2380
    reject_with_alert: False
    default_upstream: ~
    route_header:
    tcp_keepalive: null
    kind: tls_passthrough
    routes:
      - { sni: \"*.example.com\", upstream: up }
upstreams:
  - name: up
    endpoints: [\"10.0.0.1:2380\"]
    idle_timeout: null
    tcp_keepalive: { time: 1s, interval: 2s, probes: 3 }
    load_balancing: round_robin
    outlier_detection:
";
        let fast: ProxyConfig = parse(text).unwrap();
        let node = marked_yaml::parse_yaml(0, text).unwrap();
        let marked: ProxyConfig = marked_yaml::from_node(&node).unwrap();
        assert_eq!(fast, marked);
        assert_eq!(parse::<ProxyConfig>("").unwrap(), parse("{}").unwrap());
    }
}
