//! A small command-line parser: positional arguments and `--name value`
//! (or `--name=value`) options, some of which repeat.

use std::collections::HashMap;

/// What one subcommand accepts.
pub struct Spec {
    /// Options that take a value.
    pub values: &'static [&'static str],
    /// Options that take a value and may be given more than once.
    pub repeated: &'static [&'static str],
    /// Options without a value.
    pub flags: &'static [&'static str],
}

/// Parsed arguments.
#[derive(Debug, Default)]
pub struct Args {
    pub positional: Vec<String>,
    values: HashMap<String, Vec<String>>,
    flags: Vec<String>,
}

impl Spec {
    fn has_value(&self, name: &str) -> bool {
        self.values.contains(&name) || self.repeated.contains(&name)
    }
}

impl Args {
    pub fn parse(spec: &Spec, args: &[String]) -> Result<Args, String> {
        Args::parse_all(&[spec], args)
    }

    /// Parses with the options of several specs together (a command's own
    /// and shared groups such as the placement options).
    pub fn parse_all(specs: &[&Spec], args: &[String]) -> Result<Args, String> {
        let is_flag = |n: &str| specs.iter().any(|s| s.flags.contains(&n));
        let has_value = |n: &str| specs.iter().any(|s| s.has_value(n));
        let repeats = |n: &str| specs.iter().any(|s| s.repeated.contains(&n));
        let mut out = Args::default();
        let mut i = 0;
        while i < args.len() {
            let a = &args[i];
            i += 1;
            if !a.starts_with("--") || a == "--" {
                out.positional.push(a.clone());
                continue;
            }
            let (name, inline) = match a.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (a.as_str(), None),
            };
            if is_flag(name) {
                if inline.is_some() {
                    return Err(format!("{name} takes no value"));
                }
                out.flags.push(name.to_string());
            } else if has_value(name) {
                let v = match inline {
                    Some(v) => v,
                    None => {
                        let v = args.get(i).ok_or_else(|| format!("{name} needs a value"))?;
                        i += 1;
                        v.clone()
                    }
                };
                let slot = out.values.entry(name.to_string()).or_default();
                if !slot.is_empty() && !repeats(name) {
                    return Err(format!("{name} is given twice"));
                }
                slot.push(v);
            } else {
                return Err(format!("unknown option '{name}'"));
            }
        }
        Ok(out)
    }

    pub fn flag(&self, name: &str) -> bool {
        self.flags.iter().any(|f| f == name)
    }

    pub fn value(&self, name: &str) -> Option<&str> {
        self.values
            .get(name)
            .and_then(|v| v.first())
            .map(String::as_str)
    }

    pub fn all(&self, name: &str) -> &[String] {
        self.values.get(name).map_or(&[], Vec::as_slice)
    }

    /// The value of `name` parsed with `parse`, or `default`.
    pub fn parsed<T>(
        &self,
        name: &str,
        default: T,
        parse: impl Fn(&str) -> Option<T>,
        what: &str,
    ) -> Result<T, String> {
        match self.value(name) {
            None => Ok(default),
            Some(v) => parse(v).ok_or_else(|| format!("{name} {v}: expected {what}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: Spec = Spec {
        values: &["--ctx"],
        repeated: &["--gpu-free"],
        flags: &["--json"],
    };

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn options_values_and_repeats_parse() {
        let a = Args::parse(
            &SPEC,
            &args(&[
                "m.gguf",
                "--ctx",
                "8192",
                "--gpu-free=8GiB",
                "--gpu-free",
                "4GiB",
                "--json",
            ]),
        )
        .unwrap();
        assert_eq!(a.positional, vec!["m.gguf"]);
        assert_eq!(a.value("--ctx"), Some("8192"));
        assert_eq!(
            a.all("--gpu-free"),
            &["8GiB".to_string(), "4GiB".to_string()]
        );
        assert!(a.flag("--json"));
    }

    #[test]
    fn mistakes_are_named() {
        assert!(
            Args::parse(&SPEC, &args(&["--nope"]))
                .unwrap_err()
                .contains("--nope")
        );
        assert!(
            Args::parse(&SPEC, &args(&["--ctx"]))
                .unwrap_err()
                .contains("needs a value")
        );
        assert!(
            Args::parse(&SPEC, &args(&["--ctx", "1", "--ctx", "2"]))
                .unwrap_err()
                .contains("twice")
        );
        assert!(
            Args::parse(&SPEC, &args(&["--json=1"]))
                .unwrap_err()
                .contains("no value")
        );
    }
}
