//! What every program does with its command line: llama.cpp's
//! single-dash spellings, clap's parse, shell completions.
//!
//! llama.cpp spells many options with one dash and several letters
//! (`-ngl 99`, `-ts 3,1`, `-ot RE=DEV`, `-ub 256`, `-fa on`). clap reads a
//! single dash as one-letter flags (`-ngl` would be `-n gl`), so before
//! parsing, a single-dash word that is the long name or an alias of one of
//! the program's options (`-ngl` for `--ngl`, an alias of
//! `--n-gpu-layers`) gets its second dash. Words that are an option's value
//! (`--prompt -fa`) and everything after `--` are left alone.

use std::collections::HashSet;
use std::ffi::OsString;

use clap::{Command, CommandFactory, Parser};
use clap_complete::Shell;

/// The long names and aliases of `cmd`'s options and of its
/// subcommands', and which spellings (`--name`, `-n`) take a value.
struct Spellings {
    long: HashSet<String>,
    takes_value: HashSet<String>,
}

impl Spellings {
    fn of(cmd: &Command) -> Spellings {
        let mut s = Spellings {
            long: HashSet::new(),
            takes_value: HashSet::new(),
        };
        s.add(cmd);
        s
    }

    fn add(&mut self, cmd: &Command) {
        for a in cmd.get_arguments() {
            let mut names: Vec<String> = Vec::new();
            if let Some(l) = a.get_long() {
                names.push(l.to_string());
            }
            names.extend(
                a.get_all_aliases()
                    .unwrap_or_default()
                    .into_iter()
                    .map(str::to_string),
            );
            let value = a.get_action().takes_values();
            for n in &names {
                self.long.insert(n.clone());
                if value {
                    self.takes_value.insert(format!("--{n}"));
                    self.takes_value.insert(format!("-{n}"));
                }
            }
            if value && let Some(c) = a.get_short() {
                self.takes_value.insert(format!("-{c}"));
            }
        }
        for sub in cmd.get_subcommands() {
            self.add(sub);
        }
    }
}

/// `args` (the program name first) with llama.cpp's single-dash
/// spellings of `cmd`'s long options given their second dash.
pub fn llama_cpp_spellings<I, T>(cmd: &Command, args: I) -> Vec<OsString>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    let spellings = Spellings::of(cmd);
    let mut out: Vec<OsString> = Vec::new();
    let mut value_next = false;
    let mut rest = false;
    for (i, arg) in args.into_iter().enumerate() {
        let arg: OsString = arg.into();
        if i == 0 || rest {
            out.push(arg);
            continue;
        }
        let Some(s) = arg.to_str() else {
            value_next = false;
            out.push(arg);
            continue;
        };
        if value_next {
            value_next = false;
            out.push(arg);
            continue;
        }
        if s == "--" {
            rest = true;
            out.push(arg);
            continue;
        }
        let (flag, inline) = match s.split_once('=') {
            Some((f, _)) => (f, true),
            None => (s, false),
        };
        let single_dash_long = flag.len() > 2
            && flag.starts_with('-')
            && !flag.starts_with("--")
            && spellings.long.contains(&flag[1..]);
        value_next = !inline && spellings.takes_value.contains(flag);
        if single_dash_long {
            out.push(format!("-{s}").into());
        } else {
            out.push(arg);
        }
    }
    out
}

/// Parses `args` (the program name first) as `T`, with llama.cpp's
/// spellings; the error is clap's (exit code 2 for a mistake).
pub fn try_parse_from<T, I, A>(args: I) -> Result<T, clap::Error>
where
    T: Parser,
    I: IntoIterator<Item = A>,
    A: Into<OsString>,
{
    let mut cmd = T::command();
    let args = llama_cpp_spellings(&cmd, args);
    let mut matches = cmd.try_get_matches_from_mut(args)?;
    T::from_arg_matches_mut(&mut matches).map_err(|e| e.format(&mut cmd))
}

/// The process's command line as `T`; on a mistake, clap's message and
/// exit code 2 (0 for `--help` and `--version`).
pub fn parse<T: Parser>() -> T {
    parse_with_matches().0
}

/// [`parse`], with clap's matches: where each value came from (the
/// command line or a default).
pub fn parse_with_matches<T: Parser>() -> (T, clap::ArgMatches) {
    let mut cmd = T::command();
    let args = llama_cpp_spellings(&cmd, std::env::args_os());
    let matches = cmd
        .try_get_matches_from_mut(args)
        .unwrap_or_else(|e| e.exit());
    let parsed = T::from_arg_matches(&matches).unwrap_or_else(|e| e.format(&mut cmd).exit());
    // the environment's settings are options too: a bad one is refused
    // as a bad flag is
    if let Err(e) = ggraph_cpu::sim_configs_from_env() {
        usage_error::<T>(clap::error::ErrorKind::ValueValidation, e).exit();
    }
    (parsed, matches)
}

/// The completion script of `T`'s command for `shell`.
pub fn completions<T: CommandFactory>(shell: Shell) -> String {
    let mut cmd = T::command();
    let name = cmd.get_name().to_string();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, name, &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// A usage mistake found after parsing (a rule clap does not express),
/// reported as clap reports its own: `kind`, the message, a hint, exit
/// code 2.
pub fn usage_error<T: CommandFactory>(
    kind: clap::error::ErrorKind,
    msg: impl std::fmt::Display,
) -> clap::Error {
    T::command().error(kind, msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Parser, Debug)]
    struct T {
        #[arg(long = "n-gpu-layers", visible_alias = "ngl")]
        ngl: Option<String>,
        #[arg(short = 'n')]
        n: Option<String>,
        #[arg(short = 'p', long)]
        prompt: Option<String>,
        #[arg(long)]
        fit: bool,
        rest: Vec<String>,
    }

    fn rewrite(args: &[&str]) -> Vec<String> {
        llama_cpp_spellings(&T::command(), args.iter().copied())
            .into_iter()
            .map(|s| s.into_string().unwrap())
            .collect()
    }

    #[test]
    fn single_dash_long_names_get_a_second_dash_but_values_do_not() {
        assert_eq!(
            rewrite(&["t", "-ngl", "9", "-n", "4", "-ngl=3", "-fit"]),
            ["t", "--ngl", "9", "-n", "4", "--ngl=3", "--fit"]
        );
        // a value that looks like an option, and everything after `--`
        assert_eq!(
            rewrite(&["t", "--prompt", "-ngl", "-p", "-fit", "--", "-ngl"]),
            ["t", "--prompt", "-ngl", "-p", "-fit", "--", "-ngl"]
        );
        // unknown single-dash words are clap's to refuse
        assert_eq!(rewrite(&["t", "-xyz"]), ["t", "-xyz"]);
        let t: T = try_parse_from(["t", "-ngl", "9", "-n", "4"]).unwrap();
        assert_eq!((t.ngl.as_deref(), t.n.as_deref()), (Some("9"), Some("4")));
    }

    #[test]
    fn completions_for_bash_name_the_options() {
        let s = completions::<T>(Shell::Bash);
        assert!(
            s.contains("--n-gpu-layers") && s.contains("--prompt"),
            "{s}"
        );
    }
}
