//! System.map and `/proc/kallsyms` text as the placement planner reads it
//! (`kperfdiff place --sizes`): lines of `ADDRESS TYPE NAME [MODULE]`.
//!
//! The grammar is the one `kperfdiff.place.inputs` has always accepted, the
//! regular expression `^([0-9a-fA-F]{4,16})\s+([A-Za-z?])\s+(\S+)(?:\s+\[(\S+)\])?\s*$`
//! over the lines of Python's `str.splitlines()` with Python's (Unicode)
//! whitespace; blank lines are skipped, other lines that do not match are
//! counted. The profile reader's kallsyms.rs keeps its own, more lenient
//! tokenizer (any number of hex digits, any type byte, extra fields ignored):
//! changing it would change which symbols existing profiles get.

/// One line of a symbol map.
#[derive(Debug, PartialEq, Eq)]
pub struct Line<'a> {
    pub addr: u64,
    pub ty: u8,
    pub name: &'a str,
    pub module: Option<&'a str>,
}

/// Every line of a symbol map, and how many non-blank lines did not parse.
#[derive(Debug, Default)]
pub struct Map<'a> {
    pub lines: Vec<Line<'a>>,
    pub bad: usize,
}

/// Python's `str.isspace()` (what `\s` matches in a `str` pattern): Unicode
/// White_Space plus the ASCII separators U+001C..U+001F.
pub fn is_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// A line boundary of Python's `str.splitlines()`.
fn is_break(c: char) -> bool {
    matches!(c, '\n' | '\r' | '\u{0b}' | '\u{0c}' | '\u{1c}' | '\u{1d}' | '\u{1e}' | '\u{85}' | '\u{2028}' | '\u{2029}')
}

/// The lines of `text` as Python's `str.splitlines()` gives them ("\r\n" is one break).
pub fn lines(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        match rest.char_indices().find(|&(_, c)| is_break(c)) {
            None => {
                let line = rest;
                rest = "";
                Some(line)
            }
            Some((i, c)) => {
                let line = &rest[..i];
                let mut next = i + c.len_utf8();
                if c == '\r' && rest[next..].starts_with('\n') {
                    next += 1;
                }
                rest = &rest[next..];
                Some(line)
            }
        }
    })
}

/// The leading run of `s` whose characters satisfy `f`, and the rest.
fn span(s: &str, f: impl Fn(char) -> bool) -> (&str, &str) {
    let n = s.char_indices().find(|&(_, c)| !f(c)).map_or(s.len(), |(i, _)| i);
    s.split_at(n)
}

/// One line, or None when it does not have the form `ADDRESS TYPE NAME [MODULE]`.
pub fn parse_line(line: &str) -> Option<Line<'_>> {
    let (hex, rest) = span(line, |c| c.is_ascii_hexdigit());
    if !(4..=16).contains(&hex.len()) {
        return None;
    }
    let (sp, rest) = span(rest, is_space);
    if sp.is_empty() {
        return None;
    }
    let ty = *rest.as_bytes().first()?;
    if !(ty.is_ascii_alphabetic() || ty == b'?') {
        return None;
    }
    let (sp, rest) = span(&rest[1..], is_space);
    if sp.is_empty() {
        return None;
    }
    let (name, rest) = span(rest, |c| !is_space(c));
    if name.is_empty() {
        return None;
    }
    let (_, rest) = span(rest, is_space);
    let (token, rest) = span(rest, |c| !is_space(c));
    let module = if token.is_empty() {
        None
    } else {
        // one more field, `[MODULE]`, then only whitespace
        let inner = token.strip_prefix('[')?.strip_suffix(']')?;
        if inner.is_empty() || !span(rest, is_space).1.is_empty() {
            return None;
        }
        Some(inner)
    };
    let addr = u64::from_str_radix(hex, 16).ok()?;
    Some(Line { addr, ty, name, module })
}

/// Every line of `text`.
pub fn parse(text: &str) -> Map<'_> {
    let mut map = Map::default();
    for line in lines(text) {
        if line.chars().all(is_space) {
            continue;
        }
        match parse_line(line) {
            Some(l) => map.lines.push(l),
            None => map.bad += 1,
        }
    }
    map
}

/// `symbol_map(data)`: the lines of a System.map or kallsyms file (bytes,
/// read as UTF-8 with U+FFFD for what is not) as a dict of addrs (list of
/// int), types (str, one letter a line), names (list of str), modules (True
/// when a line names a module) and bad (the number of non-blank lines that
/// do not parse).
#[pyo3::pyfunction]
pub fn symbol_map<'py>(py: pyo3::Python<'py>, data: &[u8]) -> pyo3::PyResult<pyo3::Bound<'py, pyo3::types::PyDict>> {
    use pyo3::types::{PyDictMethods, PyListMethods};
    crate::elf::guarded("a symbol map", data, |data| {
        let text = String::from_utf8_lossy(data);
        let map = parse(&text);
        let build = || -> pyo3::PyResult<pyo3::Bound<'py, pyo3::types::PyDict>> {
            let addrs = pyo3::types::PyList::empty(py);
            let names = pyo3::types::PyList::empty(py);
            let mut types = String::with_capacity(map.lines.len());
            for l in &map.lines {
                addrs.append(l.addr)?;
                names.append(l.name)?;
                types.push(l.ty as char);
            }
            let d = pyo3::types::PyDict::new(py);
            d.set_item("addrs", addrs)?;
            d.set_item("types", types)?;
            d.set_item("names", names)?;
            d.set_item("modules", map.lines.iter().any(|l| l.module.is_some()))?;
            d.set_item("bad", map.bad)?;
            Ok(d)
        };
        build().map_err(|e| e.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line<'a>(addr: u64, ty: u8, name: &'a str, module: Option<&'a str>) -> Option<Line<'a>> {
        Some(Line { addr, ty, name, module })
    }

    #[test]
    fn the_grammar_of_the_regular_expression() {
        assert_eq!(parse_line("ffffffff81000000 T _text"), line(0xffffffff81000000, b'T', "_text", None));
        assert_eq!(parse_line("ffffffffc0000000 t mod_fn\t[ext4]"), line(0xffffffffc0000000, b't', "mod_fn", Some("ext4")));
        assert_eq!(parse_line("c0008000  ?  x  [a]b]  "), line(0xc0008000, b'?', "x", Some("a]b")));
        assert_eq!(parse_line("1234 T n\u{a0}[m]\u{2003}"), line(0x1234, b'T', "n", Some("m")));
        assert_eq!(parse_line("1234\u{1f}T\u{1f}n"), line(0x1234, b'T', "n", None));
        for bad in [
            "123 T short_address",
            "12345678901234567 T long_address",
            "ffff T",
            "ffff TT name",
            "ffff 1 name",
            "ffff T name extra",
            "ffff T name [mod] extra",
            "ffff T name []",
            "ffff T name [mod",
            "ffffT name",
            " ffff T name",
            "fffg T name",
            "ffff\u{e9} T name",
        ] {
            assert_eq!(parse_line(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn lines_as_python_splits_them() {
        let got: Vec<&str> = lines("a\r\nb\rc\u{85}d\u{2028}e\u{1f}f\n\ng").collect();
        assert_eq!(got, ["a", "b", "c", "d", "e\u{1f}f", "", "g"]);
        assert_eq!(lines("x\n").count(), 1);
        assert_eq!(lines("").count(), 0);
    }

    #[test]
    fn blank_lines_are_not_bad() {
        let m = parse("ffffffff81000000 T a\n \t\n\u{3000}\nnonsense\nffffffff81000010 t b [m]\n");
        assert_eq!(m.lines.len(), 2);
        assert_eq!(m.bad, 1);
        assert_eq!(m.lines[1].module, Some("m"));
    }
}
