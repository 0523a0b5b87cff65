//! How deeply a YAML text nests its collections, counted on the parser's event stream before
//! any tree is built.
//!
//! Why: a tree of nested nodes is built, walked and dropped recursively, so a 20 KB file of
//! 10,000 `[` overflows the stack of the thread that reads it — on a reload, the running
//! proxy's. The schemas nest six levels at most; [`MAX_DEPTH`] is far above that and far below
//! what a thread's stack holds.
//!
//! The count is exact because it comes from the parser marked-yaml itself builds its tree
//! from (yaml-rust2's events, which it produces without recursing), stopping at the first
//! event past the limit. A bound computed from the text by hand would have to tokenise YAML
//! (quotes, comments, block scalars, plain scalars spanning lines) as that parser does.

use yaml_rust2::parser::{Event, Parser};

/// Deepest nesting of collections a YAML file may have.
pub const MAX_DEPTH: usize = 64;

/// Where the nesting went past [`MAX_DEPTH`]: 1-based line and column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooDeep {
    /// Line.
    pub line: usize,
    /// Column.
    pub column: usize,
}

/// Checks that `text` nests collections at most [`MAX_DEPTH`] deep. A syntax error is not
/// this check's business (marked-yaml reports it with its position), so it passes.
pub fn check(text: &str) -> Result<(), TooDeep> {
    let mut parser = Parser::new_from_str(text);
    let mut depth = 0usize;
    loop {
        let Ok((event, mark)) = parser.next_token() else {
            return Ok(());
        };
        match event {
            Event::StreamEnd => return Ok(()),
            Event::MappingStart(..) | Event::SequenceStart(..) => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Err(TooDeep {
                        line: mark.line(),
                        column: mark.col() + 1,
                    });
                }
            }
            Event::MappingEnd | Event::SequenceEnd => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::{check, MAX_DEPTH};

    #[test]
    fn deep_nesting_is_refused_where_it_goes_past_the_limit() {
        let flow = format!("listeners: {}{}\n", "[".repeat(100), "]".repeat(100));
        let e = check(&flow).unwrap_err();
        // The top-level mapping is one level: the 64th `[` is one too many.
        assert_eq!((e.line, e.column), (1, 11 + MAX_DEPTH));
        let maps: String = (0..100).map(|i| format!("{}a:\n", " ".repeat(i))).collect();
        assert_eq!(check(&maps).unwrap_err().line, MAX_DEPTH + 1);
        let compact = format!("a:\n{}x\n", "- ".repeat(10_000));
        assert_eq!(check(&compact).unwrap_err().line, 2);
        // Quotes and comments hide nothing from the parser itself.
        let quoted = format!("a: [\"]]\", # ]]\n  {}]\n", "[".repeat(70));
        assert!(check(&quoted).is_err());
        let shallow = format!("a: [\"{}\", '{}']\n", "[".repeat(100), "{".repeat(100));
        assert_eq!(check(&shallow), Ok(()));
    }

    #[test]
    fn real_configuration_files_pass() {
        for text in [
            include_str!("../../examples/proxy.yaml"),
            include_str!("../../tunnel/examples/agent.yaml"),
            include_str!("../../tunnel/examples/server.yaml"),
            include_str!("../../tunnel/examples/server-unix.yaml"),
            "",
            "not: [valid",
        ] {
            assert_eq!(check(text), Ok(()), "{text}");
        }
    }
}
