//! Counts in messages: "1 job", "2 jobs".

/// `count` and `noun`, with an `s` unless `count` is 1.
pub(crate) fn plural(count: impl Into<u64>, noun: &str) -> String {
    let count = count.into();
    if count == 1 {
        format!("1 {noun}")
    } else {
        format!("{count} {noun}s")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn one_and_many() {
        assert_eq!(super::plural(1u64, "job"), "1 job");
        assert_eq!(super::plural(0u64, "job"), "0 jobs");
        assert_eq!(super::plural(2u64, "key"), "2 keys");
    }
}
