//! A hand-written scanner for the subset of YAML that configuration files are written in,
//! building the same [`Value`] tree as [`super::load`] (yaml-rust2's events) or nothing.
//!
//! Why: yaml-rust2 reads a 10k-route file at ~25 MB/s, most of a reload. Real files use a
//! small, regular part of YAML: block mappings and sequences laid out by indentation, one-line
//! flow collections, plain and quoted scalars on one line, comments. This reads that part at
//! memory speed, borrowing scalars from the text, and gives up (`None`) on everything else so
//! that yaml-rust2 decides.
//!
//! The invariant: `Some(tree)` only where yaml-rust2 yields exactly `tree`. Whatever is not
//! certain gives up: tabs, `\r`, control characters, document markers, directives, anchors,
//! aliases, tags, block scalars, complex keys, multi-line scalars and flow collections,
//! backslash escapes, plain scalars starting with an indicator, `: ` inside a value, trailing
//! commas, a scalar alone on the line below its key, and any indentation other than exactly
//! that of a sibling or deeper than the parent. `scan_tests` and `fast_differential` check the
//! invariant on the repository's files, edge cases and many mutants.

use super::{Value, MAX_KEYS};
use std::borrow::Cow;

/// Deeper nesting is left to yaml-rust2; it also bounds this module's recursion.
const MAX_DEPTH: usize = 64;

/// yaml-rust2 stops treating a block key as a key when its `:` is more than 1024 characters
/// from its start (an error, as the key is required); bytes count at least as many.
const MAX_KEY_LEN: usize = 1000;

/// The tree of `text`, or `None` when it is not (certainly) in the subset.
pub(super) fn scan(text: &str) -> Option<Value<'_>> {
    if !in_alphabet(text) {
        return None;
    }
    let mut s = Scanner {
        text,
        b: text.as_bytes(),
        pos: 0,
    };
    let Some(first) = s.peek()? else {
        // Only comments and blank lines: yaml-rust2 emits no document, `load` an empty map.
        return Some(Value::Map(Vec::new()));
    };
    // `inline_ok`: a top-level `{...}` is a mapping too; a top-level scalar is refused below.
    let root = s.node(first, first.indent, 0, true)?;
    // A line left over is outdented below the root, which yaml-rust2 refuses.
    if s.peek()?.is_some() || !matches!(root, Value::Map(_)) {
        return None;
    }
    Some(root)
}

/// Characters whose meaning yaml-rust2 may differ on: `\0` ends its input, `\r` and tabs
/// have context-dependent rules, BOMs and Unicode line breaks are special in YAML.
fn in_alphabet(text: &str) -> bool {
    // No early exit, so that this compiles to a vectorised pass.
    let bad_byte = text.bytes().fold(false, |bad, b| {
        bad | ((b < b' ' && b != b'\n') | (b == 0x7f))
    });
    !bad_byte
        && (text.is_ascii()
            || text.chars().all(|c| {
                !matches!(
                    c,
                    '\u{80}'
                        ..='\u{9f}'
                            | '\u{2028}'
                            | '\u{2029}'
                            | '\u{feff}'
                            | '\u{fffe}'
                            | '\u{ffff}'
                )
            }))
}

/// A line with content (not blank, not only a comment). `end` is the offset of its `\n` or
/// of the end of the text.
#[derive(Clone, Copy)]
struct Line {
    start: usize,
    indent: usize,
    end: usize,
}

impl Line {
    fn content(self) -> usize {
        self.start + self.indent
    }
    fn next(self) -> usize {
        self.end + 1
    }
}

/// A scalar or flow collection that ends its line, or a key whose value starts at the offset.
enum Inline<'a> {
    Value(Value<'a>),
    Key(Cow<'a, str>, usize),
}

fn is_flow(c: u8) -> bool {
    matches!(c, b',' | b'[' | b']' | b'{' | b'}')
}

struct Scanner<'a> {
    text: &'a str,
    b: &'a [u8],
    /// Start of the first line not consumed yet.
    pos: usize,
}

impl<'a> Scanner<'a> {
    /// Past the end reads as a line break, so that no lookahead needs a bounds check.
    fn at(&self, p: usize) -> u8 {
        self.b.get(p).copied().unwrap_or(b'\n')
    }

    fn skip_spaces(&self, mut p: usize, end: usize) -> usize {
        while p < end && self.at(p) == b' ' {
            p += 1;
        }
        p
    }

    /// `Some(None)` at the end of the text, else the next line with content; blank and comment
    /// lines are consumed on the way, since yaml-rust2 skips them wherever they are (no
    /// multi-line scalar can contain them here). `None`: a document marker or directive.
    fn peek(&mut self) -> Option<Option<Line>> {
        while let Some(rest) = self.text.get(self.pos..).filter(|r| !r.is_empty()) {
            let start = self.pos;
            let end = rest.find('\n').map_or(self.b.len(), |n| start + n);
            let indent = self.skip_spaces(start, end) - start;
            let line = Line { start, indent, end };
            let first = self.at(line.content());
            if line.content() == end || first == b'#' {
                self.pos = line.next();
                continue;
            }
            if indent == 0 && (rest.starts_with("---") || rest.starts_with("...") || first == b'%')
            {
                return None;
            }
            return Some(Some(line));
        }
        Some(None)
    }

    /// `-` as a block sequence entry (not the start of a plain scalar like `-1`).
    fn is_dash(&self, p: usize, end: usize) -> bool {
        self.at(p) == b'-' && (p + 1 == end || self.at(p + 1) == b' ')
    }

    /// Where content continues after `p` on the line, or `None` if only spaces and a comment
    /// follow. Callers pass a `p` just after a `-` or `:` that is followed by a space or the
    /// line end, so a `#` found here is always a comment.
    fn rest(&self, p: usize, end: usize) -> Option<usize> {
        let p = self.skip_spaces(p, end);
        (p < end && self.at(p) != b'#').then_some(p)
    }

    /// A block node whose first character is at column `col` of `line`: a sequence, a mapping,
    /// or, where `inline_ok` (after `- `, and at the top level, whose caller then refuses
    /// anything but a mapping), a one-line scalar or flow collection.
    fn node(&mut self, line: Line, col: usize, depth: usize, inline_ok: bool) -> Option<Value<'a>> {
        if depth > MAX_DEPTH {
            return None;
        }
        let at = line.start + col;
        if self.is_dash(at, line.end) {
            return self.seq(line, col, depth + 1);
        }
        self.pos = line.next();
        match self.inline(at, line.end, depth)? {
            Inline::Key(key, after) => self.map(line, col, key, after, depth + 1),
            Inline::Value(v) if inline_ok => Some(v),
            // A scalar alone on the line after its key: legal YAML, left to yaml-rust2.
            Inline::Value(_) => None,
        }
    }

    /// The value of a `key:` or `-` with nothing after it on its line: a node on the lines
    /// below, or the empty scalar yaml-rust2 emits for a missing value.
    fn below(&mut self, col: usize, indentless_ok: bool, depth: usize) -> Option<Value<'a>> {
        match self.peek()? {
            Some(next) if next.indent > col => self.node(next, next.indent, depth, false),
            // `key:` followed by `- item` at the key's own column is a sequence in YAML.
            Some(next)
                if indentless_ok
                    && next.indent == col
                    && self.is_dash(next.content(), next.end) =>
            {
                self.seq(next, col, depth + 1)
            }
            _ => Some(Value::Scalar(Cow::Borrowed(""))),
        }
    }

    fn seq(&mut self, mut line: Line, col: usize, depth: usize) -> Option<Value<'a>> {
        let mut items = Vec::new();
        loop {
            self.pos = line.next();
            let item = match self.rest(line.start + col + 1, line.end) {
                None => self.below(col, false, depth)?,
                Some(at) => self.node(line, at - line.start, depth, true)?,
            };
            items.push(item);
            match self.peek()? {
                Some(next) if next.indent > col => return None,
                Some(next) if next.indent == col && self.is_dash(next.content(), next.end) => {
                    line = next;
                }
                // The caller decides whether an outdented or non-entry line may follow.
                _ => return Some(Value::Seq(items)),
            }
        }
    }

    fn map(
        &mut self,
        mut line: Line,
        col: usize,
        mut key: Cow<'a, str>,
        mut after: usize,
        depth: usize,
    ) -> Option<Value<'a>> {
        let mut entries: Vec<(Cow<'a, str>, Value<'a>)> = Vec::new();
        loop {
            // The same refusals as `load`, so that both tiers agree on what they return.
            if entries.len() >= MAX_KEYS || entries.iter().any(|(k, _)| *k == key) {
                return None;
            }
            self.pos = line.next();
            let value = match self.rest(after, line.end) {
                None => self.below(col, true, depth)?,
                Some(at) if self.is_dash(at, line.end) => return None,
                Some(at) => match self.inline(at, line.end, depth)? {
                    Inline::Value(v) => v,
                    Inline::Key(..) => return None,
                },
            };
            entries.push((key, value));
            match self.peek()? {
                Some(next) if next.indent > col => return None,
                Some(next) if next.indent == col => {
                    match self.inline(next.content(), next.end, depth)? {
                        Inline::Key(k, a) => (key, after, line) = (k, a, next),
                        Inline::Value(_) => return None,
                    }
                }
                _ => return Some(Value::Map(entries)),
            }
        }
    }

    /// A scalar or flow collection at `at` in block context that must be followed on its line
    /// by nothing but a comment (a value), or by `: ` / `:` at the end (a key).
    fn inline(&self, at: usize, end: usize, depth: usize) -> Option<Inline<'a>> {
        let (value, stop) = self.flow_node(at, end, depth, false)?;
        let p = self.skip_spaces(stop, end);
        if self.at(p) == b':' && (p + 1 == end || self.at(p + 1) == b' ') {
            return match value {
                Value::Scalar(k) if p - at <= MAX_KEY_LEN => Some(Inline::Key(k, p + 1)),
                _ => None,
            };
        }
        // yaml-rust2 requires whitespace before a comment after a token.
        (p == end || (self.at(p) == b'#' && p > stop)).then_some(Inline::Value(value))
    }

    /// A scalar or (one-line) flow collection at `at`, and the offset just after it. `flow`:
    /// inside `[]`/`{}`, where `,[]{}` end a plain scalar.
    fn flow_node(
        &self,
        at: usize,
        end: usize,
        depth: usize,
        flow: bool,
    ) -> Option<(Value<'a>, usize)> {
        match self.at(at) {
            b'[' | b'{' => self.flow(at, end, depth + 1),
            b'"' | b'\'' => {
                let (s, p) = self.quoted(at, end)?;
                Some((Value::Scalar(s), p))
            }
            _ => {
                let p = self.plain(at, end, flow)?;
                Some((Value::Scalar(Cow::Borrowed(self.text.get(at..p)?)), p))
            }
        }
    }

    fn flow(&self, at: usize, end: usize, depth: usize) -> Option<(Value<'a>, usize)> {
        if depth > MAX_DEPTH {
            return None;
        }
        let is_map = self.at(at) == b'{';
        let close = if is_map { b'}' } else { b']' };
        let mut items = Vec::new();
        let mut entries: Vec<(Cow<'a, str>, Value<'a>)> = Vec::new();
        let mut p = self.skip_spaces(at + 1, end);
        if self.at(p) == close {
            let empty = if is_map {
                Value::Map(entries)
            } else {
                Value::Seq(items)
            };
            return Some((empty, p + 1));
        }
        loop {
            if is_map {
                if matches!(self.at(p), b'[' | b'{') {
                    return None; // a collection as a key
                }
                let (Value::Scalar(key), q) = self.flow_node(p, end, depth, true)? else {
                    return None;
                };
                let q = self.skip_spaces(q, end);
                // `{a}`, `{a:b}`, `{"a":b}`, `{a: }`: legal, with rules not worth mirroring.
                if self.at(q) != b':' || self.at(q + 1) != b' ' {
                    return None;
                }
                let (value, r) = self.flow_node(self.skip_spaces(q + 1, end), end, depth, true)?;
                if entries.len() >= MAX_KEYS || entries.iter().any(|(k, _)| *k == key) {
                    return None;
                }
                entries.push((key, value));
                p = r;
            } else {
                let (value, r) = self.flow_node(p, end, depth, true)?;
                items.push(value);
                p = r;
            }
            p = self.skip_spaces(p, end);
            match self.at(p) {
                b',' => {
                    p = self.skip_spaces(p + 1, end);
                    if self.at(p) == close {
                        return None; // a trailing comma
                    }
                }
                c if c == close && is_map => return Some((Value::Map(entries), p + 1)),
                c if c == close => return Some((Value::Seq(items), p + 1)),
                // `[a: b]`, a comment, the end of the line: not one-line flow we mirror.
                _ => return None,
            }
        }
    }

    /// A quoted scalar closed on its line, without backslash escapes; `''` in single quotes.
    fn quoted(&self, at: usize, end: usize) -> Option<(Cow<'a, str>, usize)> {
        let q = self.at(at);
        let body = self.b.get(at + 1..end)?;
        let p = at
            + 1
            + body
                .iter()
                .position(|&c| c == q || (q == b'"' && c == b'\\'))?;
        if self.at(p) != q {
            return None; // an escape sequence
        }
        if q == b'\'' && self.at(p + 1) == b'\'' {
            return self.unescape_single(at, end);
        }
        Some((Cow::Borrowed(self.text.get(at + 1..p)?), p + 1))
    }

    /// Single quotes with `''` inside: unescaped into a new string.
    fn unescape_single(&self, at: usize, end: usize) -> Option<(Cow<'a, str>, usize)> {
        let mut s = String::new();
        let (mut p, mut from) = (at + 1, at + 1);
        while p < end {
            match self.at(p) {
                b'\'' if self.at(p + 1) == b'\'' => {
                    s.push_str(self.text.get(from..p + 1)?);
                    p += 2;
                    from = p;
                }
                b'\'' => {
                    s.push_str(self.text.get(from..p)?);
                    return Some((Cow::Owned(s), p + 1));
                }
                _ => p += 1,
            }
        }
        None
    }

    /// The end of the plain scalar at `at` (trailing spaces excluded), which must not start
    /// with an indicator; it ends at ` #`, at `:` before a space or the line end (in flow
    /// context also before a flow indicator), at a flow indicator in flow context, and at the
    /// line end.
    fn plain(&self, at: usize, end: usize, flow: bool) -> Option<usize> {
        match self.at(at) {
            b'-' if self.at(at + 1).is_ascii_alphanumeric() => {}
            b'-' | b'?' | b':' | b',' | b'[' | b']' | b'{' | b'}' | b'#' | b'&' | b'*' | b'!'
            | b'|' | b'>' | b'\'' | b'"' | b'%' | b'@' | b'`' | b' ' | b'\n' => return None,
            _ => {}
        }
        let line = self.b.get(at..end)?;
        let mut last = 0;
        for (i, &c) in line.iter().enumerate() {
            let next = line.get(i + 1).copied().unwrap_or(b'\n');
            match c {
                b' ' => continue,
                // yaml-rust2 refuses a word of a flow plain scalar that is `-` then `,[]{}`.
                b'-' if flow && i > 0 && line[i - 1] == b' ' && is_flow(next) => return None,
                b'#' if i > 0 && line[i - 1] == b' ' => break,
                b':' if next == b' ' || next == b'\n' || (flow && is_flow(next)) => break,
                c if flow && is_flow(c) => break,
                _ => last = i + 1,
            }
        }
        Some(at + last)
    }
}
