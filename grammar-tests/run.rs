//! Runs the classifier over every statement in `grammar-tests/*.test` and checks what each must become.
//!
//! The format is described in `grammar-tests/README.md`. The runner collects *every* problem — malformed
//! records and wrong classifications alike, each with `file:line` — and fails once at the end, so one run
//! shows the whole picture. It also fails when the corpus is suspiciously small, so that a broken glob or an
//! emptied directory cannot make it pass by checking nothing.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use msgproxy::sql::{classify, Action, Keyword};

/// Fewer statements than this means the corpus was not found or not read, not that all is well.
const MIN_STATEMENTS: usize = 300;

/// The line that separates records.
const SEPARATOR: &str = "----";

/// What a record says its statement must become.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// `expect: relay <keyword>` or `expect: virtual <keyword>`.
    Classified { action: Action, keyword: Keyword },
}

/// How the statement's text is turned into the bytes a client would send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Utf8,
    /// Every character must be U+0000..=U+00FF and becomes that one byte — so a file (which is UTF-8) can
    /// hold statements that are not valid UTF-8 on the wire.
    Latin1,
}

/// One statement with its expectation, ready to check.
struct Case {
    /// `file:line` of the record's `expect:` line.
    location: String,
    expect: Expect,
    sql: Vec<u8>,
}

#[test]
fn grammar_corpus() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("grammar-tests");
    let mut problems = Vec::new();
    let mut cases = Vec::new();
    for file in test_files(&dir, &mut problems) {
        match std::fs::read_to_string(&file) {
            Ok(text) => parse_file(&display_name(&file), &text, &mut cases, &mut problems),
            Err(e) => problems.push(format!("{}: cannot read: {e}", file.display())),
        }
    }

    let mut seen: HashMap<&[u8], &str> = HashMap::new();
    for case in &cases {
        if let Some(first) = seen.insert(&case.sql, &case.location) {
            problems.push(format!(
                "{}: duplicate of the statement at {first}",
                case.location
            ));
        }
        if let Some(problem) = check(case) {
            problems.push(problem);
        }
    }
    if cases.len() < MIN_STATEMENTS {
        problems.push(format!(
            "only {} statements found in {} (at least {MIN_STATEMENTS} expected): is the corpus missing?",
            cases.len(),
            dir.display()
        ));
    }

    if !problems.is_empty() {
        let mut report = String::new();
        for problem in &problems {
            let _ = writeln!(report, "{problem}");
        }
        panic!(
            "{} problem(s) in the grammar corpus ({} statements):\n{report}",
            problems.len(),
            cases.len()
        );
    }
    println!(
        "grammar corpus: {} statements, all as expected",
        cases.len()
    );
}

/// Every `*.test` file in `dir`, sorted so reports are stable.
fn test_files(dir: &Path, problems: &mut Vec<String>) -> Vec<PathBuf> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => {
            problems.push(format!("{}: cannot list: {e}", dir.display()));
            return Vec::new();
        }
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "test"))
        .collect();
    files.sort();
    files
}

/// The path relative to the crate, as an editor wants it in `file:line`.
fn display_name(file: &Path) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    file.strip_prefix(root)
        .unwrap_or(file)
        .display()
        .to_string()
}

/// Splits one file into records and turns each into a [`Case`] (or a problem).
fn parse_file(name: &str, text: &str, cases: &mut Vec<Case>, problems: &mut Vec<String>) {
    let mut record: Vec<(usize, &str)> = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line == SEPARATOR {
            parse_record(name, &record, cases, problems);
            record.clear();
        } else {
            record.push((index + 1, line));
        }
    }
    parse_record(name, &record, cases, problems);
}

/// Reads one record: header lines (`key: value`), then the statement, which runs to the next separator.
fn parse_record(
    name: &str,
    lines: &[(usize, &str)],
    cases: &mut Vec<Case>,
    problems: &mut Vec<String>,
) {
    // Blank lines between the separator and the headers are layout, not statement.
    let first = lines.iter().position(|(_, line)| !line.trim().is_empty());
    let Some(first) = first else {
        return;
    };
    let lines = &lines[first..];
    let mut expect = None;
    // An `expect:` line that could not be read is reported once, not again as "no expect line".
    let mut bad_expect = false;
    let mut encoding = Encoding::Utf8;
    let mut body_start = lines.len();
    for (i, &(number, line)) in lines.iter().enumerate() {
        let Some((key, value)) = header(line) else {
            body_start = i;
            break;
        };
        let at = format!("{name}:{number}");
        match key {
            "expect" => match parse_expect(value) {
                Ok(_) if expect.is_some() => problems.push(format!("{at}: a second `expect:` line")),
                Ok(e) => expect = Some((at, e)),
                Err(e) => {
                    bad_expect = true;
                    problems.push(format!("{at}: {e}"));
                }
            },
            "encoding" => match value {
                "utf8" => encoding = Encoding::Utf8,
                "latin1" => encoding = Encoding::Latin1,
                _ => problems.push(format!("{at}: unknown encoding `{value}` (utf8 or latin1)")),
            },
            "note" => {}
            "parse" => problems.push(format!(
                "{at}: `parse:` expectations are not checked by this runner yet; extend grammar-tests/run.rs"
            )),
            _ => problems.push(format!("{at}: unknown header `{key}:`")),
        }
    }

    let body = &lines[body_start..];
    let end = body
        .iter()
        .rposition(|(_, line)| !line.trim().is_empty())
        .map_or(0, |i| i + 1);
    let body = &body[..end];
    let first_line = lines.first().map_or(0, |&(n, _)| n);
    match (expect, body.is_empty()) {
        // A record of notes only: commentary, e.g. a file's preamble.
        (None, true) => {}
        (None, false) if bad_expect => {}
        (None, false) => problems.push(format!(
            "{name}:{}: statement without an `expect:` line",
            body[0].0
        )),
        (Some((at, _)), true) => problems.push(format!("{at}: `expect:` without a statement")),
        (Some((location, expect)), false) => {
            let text = body
                .iter()
                .map(|&(_, line)| line)
                .collect::<Vec<_>>()
                .join("\n");
            match encode(&text, encoding) {
                Ok(sql) => cases.push(Case {
                    location,
                    expect,
                    sql,
                }),
                Err(e) => problems.push(format!("{name}:{first_line}: {e}")),
            }
        }
    }
}

/// Splits a header line `key: value`; `None` when the line is not one (then the statement has begun).
fn header(line: &str) -> Option<(&str, &str)> {
    let (key, value) = line.split_once(':')?;
    let is_key = !key.is_empty() && key.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
    let is_value = value.is_empty() || value.starts_with(' ');
    (is_key && is_value).then(|| (key, value.trim()))
}

/// Reads the value of an `expect:` line.
fn parse_expect(value: &str) -> Result<Expect, String> {
    let mut words = value.split_whitespace();
    let kind = words.next().unwrap_or_default();
    let argument = words.next();
    if let Some(extra) = words.next() {
        return Err(format!("unexpected `{extra}` in `expect: {value}`"));
    }
    let action = match kind {
        "relay" => Action::Relay,
        "virtual" => Action::Virtual,
        "error" => return Err(
            "`expect: error` is not checked by this runner yet (no virtual statements); extend \
                 grammar-tests/run.rs"
                .to_owned(),
        ),
        _ => {
            return Err(format!(
                "`expect: {value}`: expected `relay <keyword>` or `virtual <keyword>`"
            ))
        }
    };
    let Some(keyword) = argument else {
        return Err(format!("`expect: {value}`: the keyword is missing"));
    };
    let keyword = keyword.parse::<Keyword>().map_err(|e| e.to_string())?;
    Ok(Expect::Classified { action, keyword })
}

/// The bytes a client would send for `text`.
fn encode(text: &str, encoding: Encoding) -> Result<Vec<u8>, String> {
    match encoding {
        Encoding::Utf8 => Ok(text.as_bytes().to_vec()),
        Encoding::Latin1 => text
            .chars()
            .map(|c| {
                u8::try_from(u32::from(c)).map_err(|_| format!("`{c}` is not a latin1 character"))
            })
            .collect(),
    }
}

/// Classifies one case; a description of the mismatch, if any.
fn check(case: &Case) -> Option<String> {
    let got = classify(&case.sql);
    let shown = String::from_utf8_lossy(&case.sql);
    let Expect::Classified { action, keyword } = case.expect;
    if (got.action, got.keyword) != (action, keyword) {
        return Some(format!(
            "{}: expected {} {keyword}, got {} {} — {shown:?}",
            case.location,
            action_name(action),
            action_name(got.action),
            got.keyword
        ));
    }
    // The offset must point at the keyword itself, or later stages would parse from the wrong place.
    let name = got.keyword.name().as_bytes();
    let at = case.sql.get(got.keyword_offset..).unwrap_or_default();
    let points_at_keyword = got.keyword == Keyword::Other
        || at
            .get(..name.len())
            .is_some_and(|w| w.eq_ignore_ascii_case(name));
    if !points_at_keyword || got.keyword_offset > case.sql.len() {
        return Some(format!(
            "{}: keyword_offset {} does not point at `{}` — {shown:?}",
            case.location, got.keyword_offset, got.keyword
        ));
    }
    None
}

fn action_name(action: Action) -> &'static str {
    match action {
        Action::Relay => "relay",
        Action::Virtual => "virtual",
    }
}
