//! Tests for the script tokenizer: separators, comments, quotes, parentheses, blocks, errors,
//! and a sweep over awkward inputs that must never panic.

use super::*;

fn words(text: &str) -> Vec<Vec<String>> {
    split(text)
        .unwrap_or_else(|e| panic!("{text:?}: {e}"))
        .iter()
        .map(|c| c.words.iter().map(|w| w.text.clone()).collect())
        .collect()
}

#[test]
fn splits_on_newlines_and_semicolons() {
    assert_eq!(
        words("show functions; show modules\nquit"),
        vec![
            vec!["show", "functions"],
            vec!["show", "modules"],
            vec!["quit"]
        ]
    );
}

#[test]
fn drops_empty_commands_and_comments() {
    assert_eq!(
        words("\n\n;;  # a comment\n  echo hi # trailing\n#last"),
        vec![vec!["echo", "hi"]]
    );
    assert!(split("").unwrap().is_empty());
    assert!(split("   \n\t ; ;").unwrap().is_empty());
}

#[test]
fn hash_inside_a_word_is_literal() {
    assert_eq!(words("echo a#b"), vec![vec!["echo", "a#b"]]);
}

#[test]
fn quotes_group_words_and_are_removed() {
    let cmds = split("show functions 'parse_*' \"a b\"").unwrap();
    let w = &cmds[0].words;
    assert_eq!(w[2].text, "parse_*");
    assert!(w[2].quoted);
    assert_eq!(w[3].text, "a b");
    assert!(!w[0].quoted);
}

#[test]
fn quotes_protect_separators_and_comments() {
    assert_eq!(
        words("echo 'a; b # c' \"d\nе\""),
        vec![vec!["echo", "a; b # c", "d\nе"]]
    );
}

#[test]
fn double_quote_escapes() {
    assert_eq!(
        words(r#"echo "say \"hi\" \\ \n""#),
        vec![vec!["echo", r#"say "hi" \ \n"#]]
    );
}

#[test]
fn adjacent_quoted_parts_join() {
    assert_eq!(words("echo ab'c d'e"), vec![vec!["echo", "abc de"]]);
}

#[test]
fn parentheses_group_a_word() {
    assert_eq!(
        words("at f entry if (n > 3) { x; }"),
        vec![vec!["at", "f", "entry", "if", "(n > 3)"]]
    );
    assert_eq!(
        words("whatis ns::f(int, char)"),
        vec![vec!["whatis", "ns::f(int, char)"]]
    );
}

#[test]
fn blocks_span_lines_and_hold_semicolons() {
    let cmds = split("at main entry {\n  n++;\n  if (n) { m--; }\n}\necho done").unwrap();
    assert_eq!(cmds.len(), 2);
    let block = cmds[0].block.as_ref().unwrap();
    assert_eq!(block.text, "n++;\n  if (n) { m--; }");
    assert_eq!(block.line, 1);
    assert_eq!(cmds[1].texts(), vec!["echo", "done"]);
    assert_eq!(cmds[1].line, 5);
}

#[test]
fn blocks_keep_quotes_raw() {
    let cmds = split(r#"execute { printf("}\"{;"); c = '}'; }"#).unwrap();
    assert_eq!(
        cmds[0].block.as_ref().unwrap().text,
        r#"printf("}\"{;"); c = '}';"#
    );
}

#[test]
fn block_then_separator_then_command() {
    let cmds = split("execute { a; } ; echo x").unwrap();
    assert_eq!(cmds.len(), 2);
    assert!(cmds[0].block.is_some());
    assert!(cmds[1].block.is_none());
}

#[test]
fn line_numbers() {
    let cmds = split("echo a\n\n# c\necho b; echo c").unwrap();
    let lines: Vec<usize> = cmds.iter().map(|c| c.line).collect();
    assert_eq!(lines, vec![1, 4, 4]);
}

#[test]
fn errors() {
    assert_eq!(
        split("echo 'abc"),
        Err(ParseError::UnterminatedQuote {
            quote: '\'',
            line: 1
        })
    );
    assert_eq!(
        split("echo\nat f {\n x;"),
        Err(ParseError::UnclosedBlock { line: 2 })
    );
    assert_eq!(
        split("echo }"),
        Err(ParseError::UnexpectedClose { line: 1 })
    );
    assert_eq!(
        split("{ x; }"),
        Err(ParseError::BlockWithoutCommand { line: 1 })
    );
    assert_eq!(
        split("at f { x; } y"),
        Err(ParseError::TextAfterBlock { line: 1 })
    );
    assert_eq!(
        split("at f { x; } { y; }"),
        Err(ParseError::TextAfterBlock { line: 1 })
    );
    assert_eq!(
        split("echo (a\n)"),
        Err(ParseError::UnclosedParen { line: 1 })
    );
    assert_eq!(
        split("execute { \"abc }"),
        Err(ParseError::UnterminatedQuote {
            quote: '"',
            line: 1
        })
    );
}

#[test]
fn error_messages_name_the_line() {
    let e = split("echo a\necho 'b").unwrap_err();
    assert_eq!(e.to_string(), "line 2: unterminated ' quote");
}

#[test]
fn incomplete_input_is_recognised() {
    assert!(needs_more("at main entry {"));
    assert!(needs_more("at main entry { if (x) {"));
    assert!(needs_more("echo 'abc"));
    assert!(!needs_more("at main entry { x; }"));
    assert!(!needs_more("echo }"));
    assert!(!needs_more(""));
}

#[test]
fn never_panics_on_awkward_inputs() {
    let pieces = [
        "", " ", "\n", ";", "#", "'", "\"", "\\", "{", "}", "(", ")", "a", "é", "\0", "\r\n", "\t",
        "'\\'", "\"\\", "{'", "(\"", "#{", "}{",
    ];
    // Every pair and triple of pieces: small, but it reaches every state transition.
    for a in pieces {
        for b in pieces {
            for c in pieces {
                let text = format!("{a}{b}{c}");
                let _ = split(&text);
                let _ = needs_more(&text);
            }
        }
    }
    let deep = "x ".to_owned() + &"{".repeat(10_000) + &"}".repeat(10_000);
    assert_eq!(split(&deep).unwrap().len(), 1);
    let parens = "x ".to_owned() + &"(".repeat(10_000);
    assert!(split(&parens).is_err());
}
