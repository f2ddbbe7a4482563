//! Configuration from the environment: FI_PROVIDER, FI_LOG_LEVEL and typed
//! provider tunables `FI_<PROV>_<NAME>`, each with a default and help text.

use crate::error::{Error, Result};
use crate::hints::ProviderFilter;

/// The type of a tunable's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TunableKind {
    /// Unsigned integer (accepts k/m/g suffixes).
    Size,
    /// Boolean (`1/0`, `true/false`, `yes/no`, `on/off`).
    Bool,
    /// Free text.
    Str,
}

/// A tunable a provider reads from the environment.
#[derive(Clone, Debug)]
pub struct Tunable {
    /// Provider (or `core`) it belongs to.
    pub prov: &'static str,
    /// Name without the prefix (`spin_us`).
    pub name: &'static str,
    /// Value type.
    pub kind: TunableKind,
    /// Default, as text.
    pub default: String,
    /// What it does.
    pub help: &'static str,
}

fn parse_size(text: &str) -> Option<usize> {
    let t = text.trim().to_ascii_lowercase();
    let (num, mul) = match t.chars().last()? {
        'k' => (&t[..t.len() - 1], 1usize << 10),
        'm' => (&t[..t.len() - 1], 1 << 20),
        'g' => (&t[..t.len() - 1], 1 << 30),
        _ => (&t[..], 1),
    };
    num.trim().parse::<usize>().ok()?.checked_mul(mul)
}

fn parse_bool(text: &str) -> Option<bool> {
    match text.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" | "y" => Some(true),
        "0" | "false" | "no" | "off" | "n" => Some(false),
        _ => None,
    }
}

impl Tunable {
    /// A size tunable.
    pub fn size(
        prov: &'static str,
        name: &'static str,
        default: usize,
        help: &'static str,
    ) -> Self {
        Tunable {
            prov,
            name,
            kind: TunableKind::Size,
            default: default.to_string(),
            help,
        }
    }
    /// A boolean tunable.
    pub fn boolean(
        prov: &'static str,
        name: &'static str,
        default: bool,
        help: &'static str,
    ) -> Self {
        Tunable {
            prov,
            name,
            kind: TunableKind::Bool,
            default: default.to_string(),
            help,
        }
    }
    /// A text tunable.
    pub fn text(prov: &'static str, name: &'static str, default: &str, help: &'static str) -> Self {
        Tunable {
            prov,
            name,
            kind: TunableKind::Str,
            default: default.to_string(),
            help,
        }
    }
    /// The environment variable name: `FI_SHM_SPIN_US`; a core tunable's
    /// has no provider part: `FI_CQ_SPIN_US`.
    pub fn var(&self) -> String {
        if self.prov.is_empty() {
            format!("FI_{}", self.name).to_ascii_uppercase()
        } else {
            format!("FI_{}_{}", self.prov, self.name).to_ascii_uppercase()
        }
    }
    /// The raw value set in the environment, if any.
    pub fn raw(&self) -> Option<String> {
        std::env::var(self.var()).ok()
    }
    /// The value as a size; an unparsable value is an error naming the variable.
    pub fn get_size(&self) -> Result<usize> {
        match self.raw() {
            None => Ok(parse_size(&self.default).unwrap_or(0)),
            Some(v) => parse_size(&v).ok_or_else(|| {
                Error::inval(format!(
                    "{}='{}' is not a size (e.g. 64, 4k, 1m)",
                    self.var(),
                    v
                ))
            }),
        }
    }
    /// The value as a size that must be at least 1 (a context or queue
    /// depth); 0 is an error naming the variable and `why` it cannot be.
    pub fn get_nonzero_size(&self, why: &str) -> Result<usize> {
        match self.get_size()? {
            0 => Err(Error::inval(format!("{}=0: {why}", self.var()))),
            v => Ok(v),
        }
    }
    /// The value as a boolean; an unparsable value is an error naming the variable.
    pub fn get_bool(&self) -> Result<bool> {
        match self.raw() {
            None => Ok(parse_bool(&self.default).unwrap_or(false)),
            Some(v) => parse_bool(&v).ok_or_else(|| {
                Error::inval(format!(
                    "{}='{}' is not a boolean (0/1, true/false)",
                    self.var(),
                    v
                ))
            }),
        }
    }
    /// The value as text.
    pub fn get_str(&self) -> String {
        self.raw().unwrap_or_else(|| self.default.clone())
    }
    /// The type name shown by `ofi info -e`.
    pub fn type_name(&self) -> &'static str {
        match self.kind {
            TunableKind::Size => "size_t",
            TunableKind::Bool => "Boolean (0/1, on/off, true/false, yes/no)",
            TunableKind::Str => "String",
        }
    }
}

/// Tunables of the core itself.
pub fn core_tunables() -> Vec<Tunable> {
    vec![
        Tunable::text(
            "",
            "provider",
            "",
            "Only use (or with ^, exclude) these providers: a comma-separated list",
        ),
        Tunable::text(
            "",
            "log_level",
            "warn",
            "Log level: warn, trace, info, debug",
        ),
        Tunable::text(
            "",
            "provider_path",
            "",
            "Colon-separated list of shared objects or directories of external providers to load",
        ),
        Tunable::size(
            "",
            "cq_spin_us",
            20,
            "Microseconds a blocking CQ or counter wait polls before it sleeps",
        ),
        Tunable::size(
            "",
            "coll_held_bytes",
            64 << 20,
            "Bytes of collective frames an endpoint holds per group for operations it has not \
             started yet (a member that runs ahead, a broadcast's root, then waits)",
        ),
        Tunable::boolean(
            "",
            "coll_board",
            true,
            "Run small collectives among members on one node through the provider's shared-memory \
             board when every member offers it (agreed at the join; 0 at one member makes its \
             groups use messages everywhere)",
        ),
        Tunable::size(
            "",
            "mr_close_ms",
            5000,
            "Milliseconds closing a memory region waits for remote accesses still running on it \
             (then fi_close returns -FI_EBUSY: retry)",
        ),
    ]
}

/// A core tunable by name.
pub fn core_tunable(name: &str) -> Tunable {
    core_tunables()
        .into_iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| Tunable::text("", "unknown", "", ""))
}

impl Tunable {
    /// The variable to set (core tunables: `FI_PROVIDER`, providers:
    /// `FI_SHM_X`): [`var`](Self::var).
    pub fn env_name(&self) -> String {
        self.var()
    }
}

/// The FI_PROVIDER filter, if set and well formed.
pub fn provider_filter() -> Result<Option<ProviderFilter>> {
    match std::env::var("FI_PROVIDER") {
        Ok(v) if !v.trim().is_empty() => ProviderFilter::parse(&v).map(Some),
        _ => Ok(None),
    }
}

/// The tracing level FI_LOG_LEVEL asks for (`warn` when unset or unknown).
/// The library only emits events: the application (the C ABI, the tools)
/// installs the subscriber and uses this to honour the variable.
pub fn log_level() -> tracing::Level {
    match std::env::var("FI_LOG_LEVEL")
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
        .as_str()
    {
        "trace" => tracing::Level::TRACE,
        "debug" => tracing::Level::DEBUG,
        "info" => tracing::Level::INFO,
        _ => tracing::Level::WARN,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn sizes_parse_with_suffixes() {
        assert_eq!(parse_size("64"), Some(64));
        assert_eq!(parse_size("4k"), Some(4096));
        assert_eq!(parse_size("2M"), Some(2 << 20));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size(""), None);
    }
    #[test]
    fn bools_parse() {
        assert_eq!(parse_bool("on"), Some(true));
        assert_eq!(parse_bool("0"), Some(false));
        assert_eq!(parse_bool("maybe"), None);
    }
    #[test]
    fn variable_names() {
        let t = Tunable::size("shm", "spin_us", 5, "h");
        assert_eq!(t.var(), "FI_SHM_SPIN_US");
        assert_eq!(core_tunable("provider").env_name(), "FI_PROVIDER");
        // What a core tunable reads is that variable too.
        assert_eq!(core_tunable("coll_held_bytes").var(), "FI_COLL_HELD_BYTES");
        assert_eq!(core_tunable("cq_spin_us").var(), "FI_CQ_SPIN_US");
    }
    #[test]
    fn nonzero_sizes_refuse_zero_naming_the_variable() {
        // Defaults only: no variable of these names is set.
        let zero = Tunable::size("cfgtest", "depth_zero", 0, "h");
        let e = zero
            .get_nonzero_size("a queue holds one entry")
            .unwrap_err();
        assert_eq!(e.code(), crate::error::errno::FI_EINVAL);
        assert!(
            e.to_string()
                .contains("FI_CFGTEST_DEPTH_ZERO=0: a queue holds one entry"),
            "{e}"
        );
        let some = Tunable::size("cfgtest", "depth_some", 8, "h");
        assert_eq!(some.get_nonzero_size("unused").unwrap(), 8);
    }
}
