//! Reading a scanner's command line: an option with its value attached (`-r1000`), after `=`
//! (`--rate=1000`) or bare. The rate rules (`rate`) and the status rules (`status`) both find
//! their options with it.

/// Splits `arg` against `flag`: `Some(Some(v))` for `--flag=v` or `-fv`, `Some(None)` for the bare
/// flag, `None` when it is not this flag. Two-character flags take attached values; longer ones
/// take `=`.
fn match_flag<'s>(arg: &'s str, flag: &str) -> Option<Option<&'s str>> {
    if arg == flag {
        return Some(None);
    }
    let rest = arg.strip_prefix(flag)?;
    if flag.len() == 2 {
        Some(Some(rest.strip_prefix('=').unwrap_or(rest)))
    } else {
        rest.strip_prefix('=').map(Some)
    }
}

/// Finds `arg` among `flags`; returns the flag and an inline value.
pub(super) fn find_flag<'s, 'f>(arg: &'s str, flags: &'f [String]) -> Option<(&'f str, Option<&'s str>)> {
    flags
        .iter()
        .find_map(|f| match_flag(arg, f).map(|v| (f.as_str(), v)))
}
