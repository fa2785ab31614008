//! No function in `src/` or `client/src/` is over [`MAX_FN_LINES`] lines: a function that
//! long does several things, each of which wants its own name.
//!
//! How it counts: from the line holding the `fn` keyword to the line holding the
//! function's closing brace, both included, so a function's doc comment and attributes
//! are not counted and everything inside it is (its comments, blank lines, nested
//! functions and closures). Every `fn` with a body is counted, tests and nested
//! functions included; nothing is skipped. Braces, `fn` and `;` inside comments, string
//! literals (raw and byte strings too) and character literals are not code, so they
//! are blanked out before counting; a declaration without a body (`fn f();` in a trait)
//! is not a function here.

use std::path::PathBuf;

use super::{root, rust_files};

/// Longest function kept, in lines.
const MAX_FN_LINES: usize = 100;

/// `text` with every comment, string literal and character literal replaced by spaces
/// (newlines kept, so line numbers hold).
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let ident_before = i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_');
        // The end (exclusive) of a literal or comment starting at `i`, if one does.
        let end = if c == '/' && next == Some('/') {
            Some(chars[i..].iter().position(|&c| c == '\n').map_or(chars.len(), |p| i + p))
        } else if c == '/' && next == Some('*') {
            let (mut depth, mut j) = (0usize, i);
            while j < chars.len() {
                if chars[j] == '/' && chars.get(j + 1) == Some(&'*') {
                    depth += 1;
                    j += 2;
                } else if chars[j] == '*' && chars.get(j + 1) == Some(&'/') {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            Some(j)
        } else if c == 'r'
            && matches!(next, Some('"' | '#'))
            && (!ident_before || prefixed(&chars, i))
        {
            // A raw string: r"…", r#"…"#, br"…", cr#"…"#.
            let hashes = chars[i + 1..].iter().take_while(|&&c| c == '#').count();
            let open = i + 1 + hashes;
            if chars.get(open) == Some(&'"') {
                let close: String =
                    std::iter::once('"').chain(std::iter::repeat_n('#', hashes)).collect();
                let rest: String = chars[open + 1..].iter().collect();
                Some(rest.find(&close).map_or(chars.len(), |p| {
                    open + 1 + rest[..p].chars().count() + close.chars().count()
                }))
            } else {
                None
            }
        } else if c == '"' {
            let mut j = i + 1;
            while j < chars.len() && chars[j] != '"' {
                j += if chars[j] == '\\' { 2 } else { 1 };
            }
            Some(j + 1)
        } else if c == '\'' && next == Some('\\') {
            // An escaped character literal: '\n', '\'', '\u{7b}'.
            chars[i + 2..].iter().position(|&c| c == '\'').map(|p| i + 2 + p + 1)
        } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            Some(i + 3)
        } else {
            None
        };
        match end {
            Some(end) => {
                let end = end.min(chars.len());
                out.extend(chars[i..end].iter().map(|&c| blank(c)));
                i = end;
            }
            None => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// Whether the `r` at `i` is a raw string's, after a `b` or `c` prefix (`br"…"`).
fn prefixed(chars: &[char], i: usize) -> bool {
    let before_prefix = i < 2 || !(chars[i - 2].is_alphanumeric() || chars[i - 2] == '_');
    matches!(chars[i - 1], 'b' | 'c') && before_prefix
}

/// `(line of its fn, lines, name)` of every function with a body in `text`.
fn functions(text: &str) -> Vec<(usize, usize, String)> {
    let code: Vec<char> = code_only(text).chars().collect();
    let line_at = |at: usize| code[..at].iter().filter(|&&c| c == '\n').count() + 1;
    let mut found = Vec::new();
    for at in 0..code.len() {
        let word_start = at == 0 || !(code[at - 1].is_alphanumeric() || code[at - 1] == '_');
        if !word_start || code.get(at..at + 3) != Some(&['f', 'n', ' ']) {
            continue;
        }
        let name: String = code[at + 3..]
            .iter()
            .skip_while(|c| c.is_whitespace())
            .take_while(|c| c.is_alphanumeric() || **c == '_')
            .collect();
        if name.is_empty() {
            continue;
        }
        // The body's `{`: the first outside parentheses and brackets (a `;` there first
        // is a declaration: `[u8; 4]` is inside brackets).
        let mut nesting = 0i32;
        let mut open = None;
        for (j, &c) in code.iter().enumerate().skip(at) {
            match c {
                '(' | '[' => nesting += 1,
                ')' | ']' => nesting -= 1,
                ';' if nesting == 0 => break,
                '{' if nesting == 0 => {
                    open = Some(j);
                    break;
                }
                _ => {}
            }
        }
        let Some(open) = open else { continue };
        let mut depth = 0usize;
        for (j, &c) in code.iter().enumerate().skip(open) {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        let first = line_at(at);
                        found.push((first, line_at(j) - first + 1, name));
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    found
}

#[test]
fn no_function_is_over_100_lines() {
    let mut files: Vec<PathBuf> = Vec::new();
    for dir in ["src", "client/src"] {
        rust_files(&root().join(dir), &mut files);
    }
    let (mut long, mut counted) = (Vec::new(), 0);
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (line, lines, name) in functions(&text) {
            counted += 1;
            if lines > MAX_FN_LINES {
                let shown = file.strip_prefix(root()).unwrap_or(file).display();
                long.push(format!("{shown}:{line} fn {name} ({lines} lines)"));
            }
        }
    }
    assert!(counted > 500, "the count found only {counted} functions");
    assert!(long.is_empty(), "functions over {MAX_FN_LINES} lines:\n{}", long.join("\n"));
}

#[test]
fn the_count_runs_from_fn_to_its_closing_brace_and_reads_only_code() {
    let text = r####"
/// A doc comment with a { and fn fake() {
#[inline]
fn first(x: [u8; 4]) -> char {
    let s = "}}} fn nested_in_a_string() {";
    let r = r#"}" fn raw() { "#;
    let c = '}';
    let e = '\'';
    /* } /* nested } */ } */
    fn inner<'a>(y: &'a str) -> &'a str { y }
    '{'
}
trait T {
    fn declared(&self) -> [u8; 2];
}
fn second() {}
"####;
    let found = functions(text);
    let named = |n: &str| found.iter().find(|f| f.2 == n).map(|f| (f.0, f.1));
    assert_eq!(named("first"), Some((4, 9)), "{found:?}");
    assert_eq!(named("inner"), Some((10, 1)));
    assert_eq!(named("second"), Some((16, 1)));
    for absent in ["fake", "nested_in_a_string", "raw", "declared"] {
        assert_eq!(named(absent), None, "{absent}: {found:?}");
    }
}
