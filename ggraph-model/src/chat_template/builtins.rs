//! The functions, filters, methods and printing of llama.cpp's Jinja
//! engine (`common/jinja/value.cpp`, `runtime.cpp`) where minijinja's
//! differ: what chat templates call in practice.

use std::fmt::Write;

use chrono::NaiveDateTime;
use chrono::format::{Item, StrftimeItems};
use minijinja::value::{Kwargs, Value, ValueKind, from_args};
use minijinja::{Environment, Error, ErrorKind, Output, State};

use super::is_c_space;

/// `tojson` refuses values nested deeper than this (a namespace can hold
/// itself).
const MAX_JSON_DEPTH: usize = 128;

/// llama.cpp's `strftime_now` formats into a buffer of 100 bytes.
const STRFTIME_BUFFER_BYTES: usize = 100;

/// Everything but the clock, which each render sets ([`install_clock`]).
pub(super) fn install(env: &mut Environment<'static>) {
    env.set_formatter(format_value);
    env.set_unknown_method_callback(python_method);
    env.add_filter("trim", trim);
    env.add_filter("string", string);
    env.add_filter("tojson", tojson);
    env.add_function("tojson", tojson);
    env.add_function("raise_exception", raise_exception);
}

/// `strftime_now(format)` at `now`.
pub(super) fn install_clock(env: &mut Environment<'static>, now: NaiveDateTime) {
    env.add_function("strftime_now", move |format: &str| strftime(now, format));
}

/// C's `strftime` into llama.cpp's 100-byte buffer: an unknown conversion,
/// an empty result or one that does not fit is an error.
pub(super) fn strftime(now: NaiveDateTime, format: &str) -> Result<String, Error> {
    let fail = || {
        Error::new(
            ErrorKind::InvalidOperation,
            format!("strftime_now: failed to format time with {format:?}"),
        )
    };
    let items: Vec<Item> = StrftimeItems::new(format).collect();
    if items.iter().any(|i| matches!(i, Item::Error)) {
        return Err(fail());
    }
    let mut out = String::new();
    write!(out, "{}", now.format_with_items(items.into_iter())).map_err(|_| fail())?;
    if out.is_empty() || out.len() >= STRFTIME_BUFFER_BYTES {
        return Err(fail());
    }
    Ok(out)
}

fn raise_exception(state: &State, msg: Value) -> Result<Value, Error> {
    Err(Error::new(
        ErrorKind::InvalidOperation,
        format!("Jinja Exception: {}", plain_string(state, &msg)?),
    ))
}

/// What `{{ value }}` prints: Python's `True`, `False` and `None`, and
/// floats as llama.cpp prints them; strings as they are (nothing is
/// auto-escaped); lists and maps as minijinja prints them, within the fuel
/// left ([`bounded_display`]).
fn format_value(out: &mut Output, state: &mut State, value: &Value) -> Result<(), Error> {
    let text = match value.kind() {
        ValueKind::String | ValueKind::Undefined => {
            return minijinja::escape_formatter(out, state, value);
        }
        _ => plain_string(state, value)?,
    };
    out.write_str(&text)
        .map_err(|_| Error::new(ErrorKind::WriteFailure, "cannot write the output"))
}

/// `value | string`: [`plain_string`].
fn string(state: &State, value: Value) -> Result<Value, Error> {
    if value.kind() == ValueKind::String {
        return Ok(value);
    }
    plain_string(state, &value).map(Value::from)
}

/// A value as llama.cpp's `as_string` makes it: strings as they are,
/// `True`/`False`, `None`, floats with six decimals less trailing zeros;
/// other values as minijinja displays them, but no longer than the fuel
/// left pays for.
fn plain_string(state: &State, value: &Value) -> Result<String, Error> {
    Ok(match value.kind() {
        ValueKind::Undefined => String::new(),
        ValueKind::None => "None".to_string(),
        ValueKind::Bool => if value.is_true() { "True" } else { "False" }.to_string(),
        ValueKind::Number if !value.is_integer() => match f64::try_from(value.clone()) {
            Ok(x) => float_string(x),
            Err(_) => value.to_string(),
        },
        ValueKind::Number => value.to_string(),
        _ => match value.as_str() {
            Some(s) => s.to_string(),
            None => bounded_display(state, value)?,
        },
    })
}

/// The most a value may print as when no fuel is set.
const MAX_DISPLAY_BYTES: u64 = 1 << 20;

/// `value`'s `Display`, paid for before it is made: a unit of fuel per
/// item of every list and map in it and per byte of the text. minijinja
/// builds this text before it charges for it, and a lazy list
/// (`[x] * 10**8`) is free to make but slow to print (its printing goes on
/// through every item even after the output refused them).
fn bounded_display(state: &State, value: &Value) -> Result<String, Error> {
    charge_items(state, value, 0)?;
    let limit = match state.fuel_levels() {
        Some((_, remaining)) => remaining,
        None => MAX_DISPLAY_BYTES,
    };
    let mut out = Capped {
        text: String::new(),
        left: usize::try_from(limit).unwrap_or(usize::MAX),
    };
    if write!(out, "{value}").is_err() {
        return Err(Error::new(
            ErrorKind::OutOfFuel,
            format!(
                "a {} prints longer than the fuel left pays for",
                value.kind()
            ),
        ));
    }
    state.consume_fuel(out.text.len() as u64)?;
    Ok(out.text)
}

/// Charges a unit of fuel per item of every sized list and map in
/// `value`, each list's length up front (so that a huge one fails at
/// once), and refuses values nested deeper than [`MAX_JSON_DEPTH`] (a
/// namespace can hold itself).
fn charge_items(state: &State, value: &Value, depth: usize) -> Result<(), Error> {
    if depth > MAX_JSON_DEPTH {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("a value nested deeper than {MAX_JSON_DEPTH} levels"),
        ));
    }
    if !matches!(
        value.kind(),
        ValueKind::Seq | ValueKind::Iterable | ValueKind::Map
    ) {
        return Ok(());
    }
    // an iterable of unknown length prints as a placeholder, not its items
    let Some(len) = value.len() else {
        return Ok(());
    };
    state.consume_fuel(len as u64)?;
    let is_map = value.kind() == ValueKind::Map;
    for item in value.try_iter()? {
        if is_map {
            charge_items(state, &item, depth + 1)?;
            let v = value.get_item(&item)?;
            charge_items(state, &v, depth + 1)?;
        } else {
            charge_items(state, &item, depth + 1)?;
        }
    }
    Ok(())
}

/// A string that refuses to grow past `left` more bytes.
struct Capped {
    text: String,
    left: usize,
}

impl Write for Capped {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.left = self.left.checked_sub(s.len()).ok_or(std::fmt::Error)?;
        self.text.push_str(s);
        Ok(())
    }
}

/// C++'s `std::to_string(double)` (`%f`) less trailing zeros, one kept.
fn float_string(x: f64) -> String {
    if !x.is_finite() {
        return c_non_finite(x);
    }
    let mut s = format!("{x:.6}");
    while s.ends_with('0') {
        s.pop();
    }
    if s.ends_with('.') {
        s.push('0');
    }
    s
}

fn c_non_finite(x: f64) -> String {
    let sign = if x.is_sign_negative() { "-" } else { "" };
    let name = if x.is_nan() { "nan" } else { "inf" };
    format!("{sign}{name}")
}

/// `value | trim` and `trim(chars)`: llama.cpp's `strip`, on ASCII
/// whitespace (C's `isspace`), not Unicode's.
fn trim(state: &State, value: Value, chars: Option<Value>) -> Result<String, Error> {
    let s = plain_string(state, &value)?;
    Ok(strip(state, &s, chars.as_ref(), true, true)?.to_string())
}

fn strip<'a>(
    state: &State,
    s: &'a str,
    chars: Option<&Value>,
    left: bool,
    right: bool,
) -> Result<&'a str, Error> {
    let chars: Option<Vec<char>> = match chars.filter(|c| !c.is_undefined() && !c.is_none()) {
        Some(c) => Some(plain_string(state, c)?.chars().collect()),
        None => None,
    };
    let matches = |c: char| match &chars {
        Some(set) => set.contains(&c),
        None => is_c_space(c),
    };
    let mut out = s;
    if left {
        out = out.trim_start_matches(matches);
    }
    if right {
        out = out.trim_end_matches(matches);
    }
    Ok(out)
}

/// Python methods on values: llama.cpp's `strip`, `lstrip`, `rstrip`,
/// `split`, `rsplit` and `format` on strings, minijinja-contrib's pycompat for the
/// rest (`startswith`, `replace`, `items`, `get`, ...).
fn python_method(
    state: &mut State,
    value: &Value,
    method: &str,
    args: &[Value],
) -> Result<Value, Error> {
    if let Some(s) = value.as_str() {
        match method {
            "strip" | "lstrip" | "rstrip" => {
                let (chars,): (Option<Value>,) = from_args(args)?;
                let left = method != "rstrip";
                let right = method != "lstrip";
                return Ok(Value::from(strip(state, s, chars.as_ref(), left, right)?));
            }
            "split" | "rsplit" => {
                let (sep, maxsplit): (Option<Value>, Option<i64>) = from_args(args)?;
                // llama.cpp splits at single spaces when no separator is given
                let sep = match sep.filter(|v| !v.is_undefined() && !v.is_none()) {
                    Some(v) => plain_string(state, &v)?,
                    None => " ".to_string(),
                };
                if sep.is_empty() {
                    return Err(Error::new(ErrorKind::InvalidOperation, "empty separator"));
                }
                let parts = split(s, &sep, maxsplit.unwrap_or(-1), method == "rsplit");
                return Ok(Value::from(parts));
            }
            // llama.cpp's: `{}` placeholders only (no widths, which could
            // ask for gigabytes)
            "format" => return format_braces(state, s, args).map(Value::from),
            _ => {}
        }
    }
    minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
}

/// `str.format(*args)` with `{}` placeholders only, as llama.cpp has it.
fn format_braces(state: &State, fmt: &str, args: &[Value]) -> Result<String, Error> {
    let mut out = String::with_capacity(fmt.len());
    let mut args = args.iter();
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if c != '{' {
            out.push(c);
            continue;
        }
        if chars.next() != Some('}') {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "format() only supports simple '{}' placeholders (as in llama.cpp)",
            ));
        }
        let arg = args.next().ok_or_else(|| {
            Error::new(
                ErrorKind::MissingArgument,
                "format() has more '{}' placeholders than arguments",
            )
        })?;
        out.push_str(&plain_string(state, arg)?);
    }
    Ok(out)
}

/// Python's `str.split(sep, maxsplit)` (or `rsplit`) with a separator.
fn split(s: &str, sep: &str, maxsplit: i64, from_right: bool) -> Vec<String> {
    let mut parts = Vec::new();
    let mut rest = s;
    let mut left = maxsplit;
    while left != 0 {
        let found = if from_right {
            rest.rfind(sep)
        } else {
            rest.find(sep)
        };
        let Some(at) = found else { break };
        if from_right {
            parts.push(rest[at + sep.len()..].to_string());
            rest = &rest[..at];
        } else {
            parts.push(rest[..at].to_string());
            rest = &rest[at + sep.len()..];
        }
        left -= 1;
    }
    parts.push(rest.to_string());
    if from_right {
        parts.reverse();
    }
    parts
}

/// `tojson(value, ensure_ascii=false, indent=none, separators=none,
/// sort_keys=false)`, as a filter and as a function: llama.cpp's
/// `value_to_json` (`", "` and `": "` by default, `","` between items
/// when indented, keys in insertion order, non-ASCII kept unless
/// `ensure_ascii`). `separators` and `sort_keys` are keyword arguments
/// only (minijinja takes at most five parameters).
fn tojson(
    state: &State,
    value: Value,
    ensure_ascii: Option<Value>,
    indent: Option<Value>,
    kwargs: Kwargs,
) -> Result<Value, Error> {
    let arg = |name: &str, positional: Option<&Value>| -> Value {
        match kwargs.get::<Option<Value>>(name) {
            Ok(Some(v)) => v,
            _ => positional.cloned().unwrap_or(Value::UNDEFINED),
        }
    };
    let ensure_ascii = arg("ensure_ascii", ensure_ascii.as_ref()).is_true();
    let indent_arg = arg("indent", indent.as_ref());
    let separators = arg("separators", None);
    if arg("sort_keys", None).is_true() {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            "tojson sort_keys=true is not implemented (as in llama.cpp)",
        ));
    }
    let indent = if indent_arg.is_integer() {
        indent_arg.as_i64().unwrap_or(-1)
    } else {
        -1
    };
    let mut seps = Vec::new();
    if matches!(separators.kind(), ValueKind::Seq) {
        for s in separators.try_iter()? {
            seps.push(plain_string(state, &s)?);
        }
    }
    let item_sep = seps.first().cloned().unwrap_or_else(|| {
        if indent < 0 {
            ", ".to_string()
        } else {
            ",".to_string()
        }
    });
    let key_sep = seps.get(1).cloned().unwrap_or_else(|| ": ".to_string());
    let mut writer = JsonWriter {
        state,
        out: String::new(),
        indent,
        item_sep: &item_sep,
        key_sep: &key_sep,
    };
    writer.write(&value, 0)?;
    let mut out = writer.out;
    if ensure_ascii {
        out = ascii_escaped(&out);
    }
    Ok(Value::from(out))
}

struct JsonWriter<'a, 's, 'e> {
    state: &'a State<'s, 'e>,
    out: String,
    indent: i64,
    item_sep: &'a str,
    key_sep: &'a str,
}

impl JsonWriter<'_, '_, '_> {
    fn write(&mut self, value: &Value, level: usize) -> Result<(), Error> {
        if level > MAX_JSON_DEPTH {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("tojson: a value nested deeper than {MAX_JSON_DEPTH} levels"),
            ));
        }
        self.state.consume_fuel(1)?;
        match value.kind() {
            ValueKind::Undefined | ValueKind::None => self.out.push_str("null"),
            ValueKind::Bool => self
                .out
                .push_str(if value.is_true() { "true" } else { "false" }),
            ValueKind::Number if value.is_integer() => self.out.push_str(&value.to_string()),
            ValueKind::Number => {
                let x = f64::try_from(value.clone()).unwrap_or(f64::NAN);
                self.out.push_str(&c_default_float(x));
            }
            ValueKind::String => self.write_string(value.as_str().unwrap_or_default()),
            ValueKind::Seq | ValueKind::Iterable | ValueKind::Map => {
                // a lazy list can be huge: pay for its items before walking it
                if let Some(len) = value.len() {
                    self.state.consume_fuel(len as u64)?;
                }
                let is_map = value.kind() == ValueKind::Map;
                self.out.push(if is_map { '{' } else { '[' });
                let mut any = false;
                for item in value.try_iter()? {
                    if any {
                        self.out.push_str(self.item_sep);
                    }
                    self.newline();
                    self.pad(level + 1)?;
                    if is_map {
                        self.write_string(&plain_string(self.state, &item)?);
                        self.out.push_str(self.key_sep);
                        let v = value.get_item(&item)?;
                        self.write(&v, level + 1)?;
                    } else {
                        self.write(&item, level + 1)?;
                    }
                    any = true;
                }
                if any {
                    self.newline();
                    self.pad(level)?;
                }
                self.out.push(if is_map { '}' } else { ']' });
            }
            _ => self.out.push_str("null"),
        }
        Ok(())
    }

    fn newline(&mut self) {
        if self.indent >= 0 {
            self.out.push('\n');
        }
    }

    /// The indentation of `level`, paid for before it is made (an indent
    /// can be any number).
    fn pad(&mut self, level: usize) -> Result<(), Error> {
        if self.indent > 0 {
            let n = usize::try_from(self.indent)
                .unwrap_or(usize::MAX)
                .saturating_mul(level);
            self.state.consume_fuel((n / 64) as u64)?;
            self.out.extend(std::iter::repeat_n(' ', n));
        }
        Ok(())
    }

    fn write_string(&mut self, s: &str) {
        self.out.push('"');
        for c in s.chars() {
            match c {
                '"' => self.out.push_str("\\\""),
                '\\' => self.out.push_str("\\\\"),
                '\u{8}' => self.out.push_str("\\b"),
                '\u{c}' => self.out.push_str("\\f"),
                '\n' => self.out.push_str("\\n"),
                '\r' => self.out.push_str("\\r"),
                '\t' => self.out.push_str("\\t"),
                c if (c as u32) < 0x20 => {
                    let _ = write!(self.out, "\\u{:04x}", c as u32);
                }
                c => self.out.push(c),
            }
        }
        self.out.push('"');
    }
}

/// C++'s `ostream << double` (`%g`, six significant digits).
fn c_default_float(x: f64) -> String {
    if !x.is_finite() {
        return c_non_finite(x);
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    const PRECISION: i32 = 6;
    let sci = format!("{:.*e}", (PRECISION - 1) as usize, x);
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..PRECISION).contains(&exp) {
        let mantissa = trim_fraction_zeros(mantissa);
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    } else {
        let decimals = usize::try_from(PRECISION - 1 - exp).unwrap_or(0);
        trim_fraction_zeros(&format!("{x:.decimals$}")).to_string()
    }
}

fn trim_fraction_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

/// JSON text with every non-ASCII character inside strings as `\uXXXX`
/// (UTF-16, lowercase hex), as llama.cpp's `ensure_ascii`.
fn ascii_escaped(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                let _ = write!(out, "\\u{:04x}", unit);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_as_cpp_prints_them() {
        assert_eq!(float_string(1.0), "1.0");
        assert_eq!(float_string(0.1), "0.1");
        assert_eq!(float_string(2.5e-7), "0.0");
        assert_eq!(c_default_float(1.5), "1.5");
        assert_eq!(c_default_float(1e6), "1e+06");
        assert_eq!(c_default_float(123456.0), "123456");
        assert_eq!(c_default_float(0.0001), "0.0001");
        assert_eq!(c_default_float(0.00001234), "1.234e-05");
        assert_eq!(c_default_float(1e100), "1e+100");
        assert_eq!(c_default_float(-2.0), "-2");
    }

    #[test]
    fn split_is_python_split_with_a_separator() {
        assert_eq!(split("a,b,c", ",", -1, false), ["a", "b", "c"]);
        assert_eq!(split("a,b,c", ",", 1, false), ["a", "b,c"]);
        assert_eq!(split("a,b,c", ",", 1, true), ["a,b", "c"]);
        assert_eq!(split("abc", ",", -1, false), ["abc"]);
    }

    #[test]
    fn ensure_ascii_escapes_as_utf16() {
        assert_eq!(ascii_escaped("\"é🦀\""), "\"\\u00e9\\ud83e\\udd80\"");
    }
}
