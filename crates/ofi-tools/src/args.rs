//! A small getopt: short flags with optional values, long `--name[=value]`
//! options and positionals, in the style fi_info and fi_pingpong accept.

use std::collections::HashMap;

/// Parsed arguments.
#[derive(Debug, Default)]
pub struct Args {
    /// Flag or option → value ("" for flags).
    pub opts: HashMap<String, String>,
    /// Positionals.
    pub pos: Vec<String>,
}

impl Args {
    /// Parses `argv` given which short options take a value (`"pePISmBP"`)
    /// and which long options take one.
    pub fn parse(argv: &[String], short_val: &str, long_val: &[&str]) -> Result<Args, String> {
        let mut a = Args::default();
        let mut i = 0;
        while i < argv.len() {
            let s = &argv[i];
            if let Some(long) = s.strip_prefix("--") {
                if long.is_empty() {
                    a.pos.extend(argv[i + 1..].iter().cloned());
                    break;
                }
                let (k, v) = match long.split_once('=') {
                    Some((k, v)) => (k.to_string(), Some(v.to_string())),
                    None => (long.to_string(), None),
                };
                if long_val.contains(&k.as_str()) {
                    let v = match v {
                        Some(v) => v,
                        None => {
                            i += 1;
                            argv.get(i)
                                .cloned()
                                .ok_or_else(|| format!("option --{k} needs a value"))?
                        }
                    };
                    a.opts.insert(k, v);
                } else {
                    a.opts.insert(k, v.unwrap_or_default());
                }
            } else if s.starts_with('-') && s.len() > 1 {
                let chars: Vec<char> = s[1..].chars().collect();
                let mut j = 0;
                while j < chars.len() {
                    let c = chars[j];
                    if short_val.contains(c) {
                        let rest: String = chars[j + 1..].iter().collect();
                        let v = if !rest.is_empty() {
                            rest
                        } else {
                            i += 1;
                            argv.get(i)
                                .cloned()
                                .ok_or_else(|| format!("option -{c} needs a value"))?
                        };
                        a.opts.insert(c.to_string(), v);
                        break;
                    }
                    a.opts.insert(c.to_string(), String::new());
                    j += 1;
                }
            } else {
                a.pos.push(s.clone());
            }
            i += 1;
        }
        Ok(a)
    }
    /// A value, if given.
    pub fn get(&self, k: &str) -> Option<&str> {
        self.opts.get(k).map(String::as_str)
    }
    /// True if a flag was given.
    pub fn has(&self, k: &str) -> bool {
        self.opts.contains_key(k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }
    #[test]
    fn short_long_and_positionals() {
        let a = Args::parse(
            &v(&[
                "-p",
                "shm",
                "-cI100",
                "--csv=x.csv",
                "--svg",
                "y.svg",
                "host",
            ]),
            "pI",
            &["csv", "svg"],
        )
        .unwrap();
        assert_eq!(a.get("p"), Some("shm"));
        assert!(a.has("c"));
        assert_eq!(a.get("I"), Some("100"));
        assert_eq!(a.get("csv"), Some("x.csv"));
        assert_eq!(a.get("svg"), Some("y.svg"));
        assert_eq!(a.pos, vec!["host".to_string()]);
        assert!(Args::parse(&v(&["-p"]), "p", &[]).is_err());
    }
}
