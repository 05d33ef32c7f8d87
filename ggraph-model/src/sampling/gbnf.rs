//! llama.cpp's GBNF grammars (`--grammar`, `grammars/*.gbnf`) read as its
//! parser reads them (`llama-grammar.cpp`), and written out as an
//! llguidance Lark grammar with the same language.
//!
//! GBNF is a grammar over characters; llguidance lexes before it parses,
//! and a lexeme that may go on swallows characters the grammar meant for
//! the next one. So every character class, `.` and each character of a
//! string is its own lexeme of one character: no lexeme is then the start
//! of a longer one, and the Earley parser sees the grammar exactly as
//! written. Rule names become `g_<name>` (lower case, `_` for `-`, a
//! number where two would meet); `root` is the start.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write;

use ggraph_core::error::{Error, Result};

/// One item of a sequence, with its repetition.
#[derive(Clone, Debug, PartialEq)]
struct Item {
    atom: Atom,
    min: u32,
    max: Option<u32>,
}

#[derive(Clone, Debug, PartialEq)]
enum Atom {
    /// A string: its characters in order.
    Literal(Vec<char>),
    /// A character class: ranges, negated or not.
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
    /// `.`: any character.
    Any,
    /// Another rule.
    Ref(String),
    /// `( ... )`.
    Group(Vec<Vec<Item>>),
}

/// A parsed grammar: each rule's alternatives, in the order defined.
#[derive(Debug, Default)]
struct Grammar {
    rules: BTreeMap<String, Vec<Vec<Item>>>,
    order: Vec<String>,
}

fn err(pos: usize, src: &str, what: &str) -> Error {
    let line = src[..pos.min(src.len())].matches('\n').count() + 1;
    let near: String = src[pos.min(src.len())..].chars().take(20).collect();
    Error::InvalidArgument(format!(
        "grammar: {what} at line {line}, near '{}'",
        near.escape_debug()
    ))
}

struct Parser<'a> {
    src: &'a str,
    pos: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<char> {
        self.src[self.pos..].chars().next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    fn error(&self, what: &str) -> Error {
        err(self.pos, self.src, what)
    }

    /// Skips blanks and comments, and newlines where `newlines`.
    fn space(&mut self, newlines: bool) {
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' => {
                    self.bump();
                }
                '\r' | '\n' if newlines => {
                    self.bump();
                }
                '#' => {
                    while self.peek().is_some_and(|c| c != '\n' && c != '\r') {
                        self.bump();
                    }
                }
                _ => break,
            }
        }
    }

    fn name(&mut self) -> Option<String> {
        let start = self.pos;
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '-')
        {
            self.bump();
        }
        (self.pos > start).then(|| self.src[start..self.pos].to_string())
    }

    fn number(&mut self) -> Result<u32> {
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.bump();
        }
        self.src[start..self.pos]
            .parse()
            .map_err(|_| self.error("expected a number"))
    }

    /// One character of a string or class, escapes decoded.
    fn char(&mut self) -> Result<char> {
        let c = self.bump().ok_or_else(|| self.error("unexpected end"))?;
        if c != '\\' {
            return Ok(c);
        }
        let e = self.bump().ok_or_else(|| self.error("unexpected end"))?;
        let hex = |p: &mut Parser, n: usize| -> Result<char> {
            let start = p.pos;
            for _ in 0..n {
                if !p.peek().is_some_and(|c| c.is_ascii_hexdigit()) {
                    return Err(p.error("expected hex digits"));
                }
                p.bump();
            }
            u32::from_str_radix(&p.src[start..p.pos], 16)
                .ok()
                .and_then(char::from_u32)
                .ok_or_else(|| p.error("not a character"))
        };
        Ok(match e {
            'x' => hex(self, 2)?,
            'u' => hex(self, 4)?,
            'U' => hex(self, 8)?,
            't' => '\t',
            'r' => '\r',
            'n' => '\n',
            '\\' | '"' | '[' | ']' => e,
            _ => return Err(self.error("unknown escape")),
        })
    }

    fn alternates(&mut self, nested: bool) -> Result<Vec<Vec<Item>>> {
        let mut alts = vec![self.sequence(nested)?];
        while self.peek() == Some('|') {
            self.bump();
            self.space(true);
            alts.push(self.sequence(nested)?);
        }
        Ok(alts)
    }

    fn sequence(&mut self, nested: bool) -> Result<Vec<Item>> {
        let mut seq: Vec<Item> = Vec::new();
        loop {
            let atom = match self.peek() {
                Some('"') => {
                    self.bump();
                    let mut s = Vec::new();
                    while self.peek() != Some('"') {
                        if self.peek().is_none() {
                            return Err(self.error("unterminated string"));
                        }
                        s.push(self.char()?);
                    }
                    self.bump();
                    Atom::Literal(s)
                }
                Some('[') => {
                    self.bump();
                    let negated = self.peek() == Some('^');
                    if negated {
                        self.bump();
                    }
                    let mut ranges = Vec::new();
                    while self.peek() != Some(']') {
                        if self.peek().is_none() {
                            return Err(self.error("unterminated character class"));
                        }
                        let lo = self.char()?;
                        let mut hi = lo;
                        if self.peek() == Some('-') && !self.src[self.pos + 1..].starts_with(']') {
                            self.bump();
                            hi = self.char()?;
                        }
                        ranges.push((lo, hi));
                    }
                    self.bump();
                    Atom::Class { negated, ranges }
                }
                Some('.') => {
                    self.bump();
                    Atom::Any
                }
                Some('(') => {
                    self.bump();
                    self.space(true);
                    let alts = self.alternates(true)?;
                    if self.peek() != Some(')') {
                        return Err(self.error("expected ')'"));
                    }
                    self.bump();
                    Atom::Group(alts)
                }
                Some(c) if c.is_ascii_alphanumeric() || c == '-' => {
                    let name = self.name().unwrap_or_default();
                    Atom::Ref(name)
                }
                Some('<') => return Err(self.error("token references (<...>) are not supported")),
                _ => break,
            };
            seq.push(Item {
                atom,
                min: 1,
                max: Some(1),
            });
            self.space(nested);
            // repetitions apply to the last item
            loop {
                let (min, max) = match self.peek() {
                    Some('*') => (0, None),
                    Some('+') => (1, None),
                    Some('?') => (0, Some(1)),
                    Some('{') => {
                        self.bump();
                        self.space(nested);
                        let min = self.number()?;
                        self.space(nested);
                        let max = if self.peek() == Some(',') {
                            self.bump();
                            self.space(nested);
                            if self.peek() == Some('}') {
                                None
                            } else {
                                Some(self.number()?)
                            }
                        } else {
                            Some(min)
                        };
                        self.space(nested);
                        if self.peek() != Some('}') {
                            return Err(self.error("expected '}'"));
                        }
                        if max.is_some_and(|m| m < min) {
                            return Err(self.error("a repetition's maximum is below its minimum"));
                        }
                        (min, max)
                    }
                    _ => break,
                };
                self.bump();
                self.space(nested);
                let last = seq.pop().ok_or_else(|| self.error("nothing to repeat"))?;
                // a repeated repetition: group it first
                let inner = if last.min == 1 && last.max == Some(1) {
                    last.atom
                } else {
                    Atom::Group(vec![vec![last]])
                };
                seq.push(Item {
                    atom: inner,
                    min,
                    max,
                });
            }
        }
        Ok(seq)
    }
}

fn parse(src: &str) -> Result<Grammar> {
    let mut p = Parser { src, pos: 0 };
    let mut g = Grammar::default();
    p.space(true);
    while p.peek().is_some() {
        let name = p.name().ok_or_else(|| p.error("expected a rule name"))?;
        p.space(false);
        if !p.src[p.pos..].starts_with("::=") {
            return Err(p.error("expected '::='"));
        }
        p.pos += 3;
        p.space(true);
        let alts = p.alternates(false)?;
        match p.peek() {
            None | Some('\n') | Some('\r') => {}
            _ => return Err(p.error("expected the end of the rule")),
        }
        if g.rules.insert(name.clone(), alts).is_some() {
            // llama.cpp lets a later definition replace an earlier one
        } else {
            g.order.push(name);
        }
        p.space(true);
    }
    if !g.rules.contains_key("root") {
        return Err(Error::InvalidArgument(
            "grammar: there is no 'root' rule".into(),
        ));
    }
    let mut missing = HashSet::new();
    for alts in g.rules.values() {
        refs(alts, &mut |r| {
            if !g.rules.contains_key(r) {
                missing.insert(r.to_string());
            }
        });
    }
    if let Some(m) = missing.into_iter().min() {
        return Err(Error::InvalidArgument(format!(
            "grammar: rule '{m}' is used but not defined"
        )));
    }
    Ok(g)
}

fn refs(alts: &[Vec<Item>], f: &mut dyn FnMut(&str)) {
    for item in alts.iter().flatten() {
        match &item.atom {
            Atom::Ref(r) => f(r),
            Atom::Group(inner) => refs(inner, f),
            _ => {}
        }
    }
}

/// The Lark grammar (llguidance's dialect) of a GBNF grammar, or what is
/// wrong with it: a syntax error with its line, an undefined rule, no
/// `root`.
pub fn gbnf_to_lark(gbnf: &str) -> Result<String> {
    let g = parse(gbnf)?;
    let mut names: HashMap<&str, String> = HashMap::new();
    let mut taken = HashSet::new();
    for n in &g.order {
        let base = format!("g_{}", n.to_ascii_lowercase().replace('-', "_"));
        let mut name = base.clone();
        let mut k = 2;
        while !taken.insert(name.clone()) {
            name = format!("{base}_{k}");
            k += 1;
        }
        names.insert(n, name);
    }
    let mut out = format!("start: {}\n", names["root"]);
    for n in &g.order {
        let _ = writeln!(
            out,
            "{}: {}",
            names[n.as_str()],
            alternates(&g.rules[n], &names)
        );
    }
    Ok(out)
}

fn alternates(alts: &[Vec<Item>], names: &HashMap<&str, String>) -> String {
    alts.iter()
        .map(|seq| {
            if seq.is_empty() {
                "\"\"".to_string()
            } else {
                seq.iter()
                    .map(|i| item(i, names))
                    .collect::<Vec<_>>()
                    .join(" ")
            }
        })
        .collect::<Vec<_>>()
        .join(" | ")
}

fn item(i: &Item, names: &HashMap<&str, String>) -> String {
    let atom = match &i.atom {
        Atom::Literal(chars) if chars.is_empty() => "\"\"".to_string(),
        Atom::Literal(chars) if chars.len() == 1 => literal(chars[0]),
        Atom::Literal(chars) => format!(
            "({})",
            chars
                .iter()
                .map(|&c| literal(c))
                .collect::<Vec<_>>()
                .join(" ")
        ),
        Atom::Class { negated, ranges } => {
            let mut s = String::from("/[");
            if *negated {
                s.push('^');
            }
            for &(lo, hi) in ranges {
                let _ = write!(s, "\\x{{{:x}}}", lo as u32);
                if hi != lo {
                    let _ = write!(s, "-\\x{{{:x}}}", hi as u32);
                }
            }
            s.push_str("]/");
            s
        }
        Atom::Any => "/(?s:.)/".to_string(),
        Atom::Ref(r) => names[r.as_str()].clone(),
        Atom::Group(alts) => format!("({})", alternates(alts, names)),
    };
    match (i.min, i.max) {
        (1, Some(1)) => atom,
        (0, None) => format!("{atom}*"),
        (1, None) => format!("{atom}+"),
        (0, Some(1)) => format!("{atom}?"),
        (m, Some(n)) if m == n => format!("{atom}{{{m}}}"),
        (m, Some(n)) => format!("{atom}{{{m},{n}}}"),
        (m, None) => format!("{atom}{{{m},}}"),
    }
}

/// One character as a Lark string of one lexeme.
fn literal(c: char) -> String {
    match c {
        '"' => "\"\\\"\"".into(),
        '\\' => "\"\\\\\"".into(),
        '\n' => "\"\\n\"".into(),
        '\t' => "\"\\t\"".into(),
        '\r' => "\"\\r\"".into(),
        c if c.is_control() => format!("/\\x{{{:x}}}/", c as u32),
        c => format!("\"{c}\""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_classes_strings_and_repetitions_convert() {
        let lark = gbnf_to_lark(
            "root ::= item-list # a comment\nitem-list ::= (\"- \" [a-z0-9]+ \"\\n\"){1,3}\n",
        )
        .unwrap();
        assert_eq!(
            lark,
            "start: g_root\ng_root: g_item_list\n\
             g_item_list: ((\"-\" \" \") /[\\x{61}-\\x{7a}\\x{30}-\\x{39}]/+ \"\\n\"){1,3}\n"
        );
    }

    #[test]
    fn mistakes_are_named_with_their_line() {
        let e = gbnf_to_lark("root ::= foo\n").unwrap_err().to_string();
        assert!(e.contains("'foo'"), "{e}");
        let e = gbnf_to_lark("start ::= \"a\"\n").unwrap_err().to_string();
        assert!(e.contains("root"), "{e}");
        let e = gbnf_to_lark("root ::= \"a\nb\n").unwrap_err().to_string();
        assert!(e.contains("line"), "{e}");
        let e = gbnf_to_lark("root ::= [a-z\n").unwrap_err().to_string();
        assert!(e.contains("unterminated character class"), "{e}");
    }
}
