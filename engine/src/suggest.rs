//! "Did you mean ...?": the one rule every suggestion in gsh follows (unknown commands,
//! function names, names in snippets). A candidate is suggested only when it is a plausible
//! typo of what was typed: at most one edit (insertion, deletion, substitution or swap of two
//! neighbours) per three characters of the longer word, so words of one or two letters are
//! never suggested nor corrected (`bp` is not a typo of `b` or `bt`).

/// The candidate closest to `typed`, if one is close enough to be a likely typo. Ties go to
/// the candidate whose length is nearest (`stauts` is `status` with two letters swapped more
/// likely than `stats` with one added), then the longest shared prefix, then the earliest.
pub fn closest<'a>(typed: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let typed_len = typed.chars().count();
    type Key = (usize, usize, std::cmp::Reverse<usize>);
    let mut best: Option<(Key, &'a str)> = None;
    for c in candidates {
        let len = c.chars().count();
        if c == typed {
            continue;
        }
        let allowed = typed_len.max(len) / 3;
        // Cheap rejection before the quadratic distance: each edit changes the length by one
        // at most.
        if typed_len.abs_diff(len) > allowed {
            continue;
        }
        let d = strsim::damerau_levenshtein(typed, c);
        if d > allowed {
            continue;
        }
        let prefix = typed
            .chars()
            .zip(c.chars())
            .take_while(|(a, b)| a == b)
            .count();
        let key = (d, typed_len.abs_diff(len), std::cmp::Reverse(prefix));
        if best.is_none_or(|(b, _)| key < b) {
            best = Some((key, c));
        }
    }
    best.map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::closest;

    #[test]
    fn typos_are_suggested() {
        let commands = ["break", "b", "where", "bt", "status", "start", "show"];
        assert_eq!(closest("stauts", commands), Some("status"));
        assert_eq!(closest("brek", commands), Some("break"));
        assert_eq!(closest("wher", commands), Some("where"));
        assert_eq!(closest("sho", commands), Some("show"));
    }

    #[test]
    fn far_words_and_one_letter_aliases_are_not() {
        let commands = ["break", "b", "where", "status", "start", "continue", "c"];
        assert_eq!(closest("bp", commands), None);
        assert_eq!(closest("bx", ["b", "bt"]), None);
        assert_eq!(closest("br", commands), None);
        assert_eq!(closest("cx", commands), None);
        assert_eq!(closest("info", commands), None);
        assert_eq!(closest("backtrace", commands), None);
        assert_eq!(closest("xyzzy", commands), None);
    }

    #[test]
    fn function_names() {
        let names = ["parse_header", "parse_body", "main", "compute"];
        assert_eq!(closest("parse_heder", names), Some("parse_header"));
        assert_eq!(closest("mian", names), Some("main"));
        assert_eq!(closest("parse", names), None);
    }
}
