//! Runs the classifier over every statement in `grammar-tests/*.test` and checks what each must become; for
//! the statements the proxy answers itself, also what `parse_virtual` makes of them (the parse, or the
//! syntax error).
//!
//! The format is described in `grammar-tests/README.md`. The runner collects *every* problem — malformed
//! records and wrong classifications alike, each with `file:line` — and fails once at the end, so one run
//! shows the whole picture. It also fails when the corpus is suspiciously small, so that a broken glob or an
//! emptied directory cannot make it pass by checking nothing.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use msgproxy::sql::{
    classify, parse_stream_statement, parse_virtual, Action, Keyword, Quoting, StartAt,
    StreamStatement, SyntaxError, TableName, VirtualStatement,
};

/// Fewer statements than this means the corpus was not found or not read, not that all is well.
const MIN_STATEMENTS: usize = 300;

/// The line that separates records.
const SEPARATOR: &str = "----";

/// What a record says its statement must become.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Expect {
    /// `expect: relay <keyword>`.
    Relay { keyword: Keyword },
    /// `expect: virtual <keyword>` with `parse: <result>`, in the form [`render`] writes.
    Virtual { keyword: Keyword, parse: String },
    /// `expect: error 1064` (or `error 1235`, an unsupported stream filter) with `near: <text>` and
    /// `line: <n>`: virtual, and the parser rejects it.
    SyntaxError { code: u16, near: String, line: u32 },
}

/// The headers of one record that together make its [`Expect`].
#[derive(Default)]
struct Headers {
    /// `file:line` and the value of the `expect:` line.
    expect: Option<(String, ExpectLine)>,
    parse: Option<String>,
    near: Option<String>,
    line: Option<u32>,
}

/// The value of an `expect:` line, before the headers it needs are joined to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ExpectLine {
    Classified {
        action: Action,
        keyword: Keyword,
    },
    /// `expect: error 1064` (a syntax error) or `error 1235` (an unsupported stream filter).
    SyntaxError(u16),
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
    let mut headers = Headers::default();
    // An expectation header (`expect:`, `near:`, `line:`) that could not be read is reported once, not again
    // as "no expect line" or "needs a `near:` line".
    let mut bad_expect = false;
    let mut encoding = Encoding::Utf8;
    let mut body_start = lines.len();
    for (i, &(number, line)) in lines.iter().enumerate() {
        let Some((key, value)) = header(line) else {
            body_start = i;
            break;
        };
        let at = format!("{name}:{number}");
        let twice =
            |problems: &mut Vec<String>| problems.push(format!("{at}: a second `{key}:` line"));
        match key {
            "expect" => match parse_expect(value) {
                Ok(_) if headers.expect.is_some() => twice(problems),
                Ok(e) => headers.expect = Some((at.clone(), e)),
                Err(e) => {
                    bad_expect = true;
                    problems.push(format!("{at}: {e}"));
                }
            },
            "parse" if headers.parse.is_some() => twice(problems),
            "parse" => headers.parse = Some(value.to_owned()),
            "near" if headers.near.is_some() => twice(problems),
            "near" => match unescape(value) {
                Ok(near) => headers.near = Some(near),
                Err(e) => {
                    bad_expect = true;
                    problems.push(format!("{at}: {e}"));
                }
            },
            "line" if headers.line.is_some() => twice(problems),
            "line" => match value.parse::<u32>() {
                Ok(n) if n >= 1 => headers.line = Some(n),
                _ => {
                    bad_expect = true;
                    problems.push(format!(
                        "{at}: `line: {value}` is not a line number (1, 2, ...)"
                    ));
                }
            },
            "encoding" => match value {
                "utf8" => encoding = Encoding::Utf8,
                "latin1" => encoding = Encoding::Latin1,
                _ => problems.push(format!("{at}: unknown encoding `{value}` (utf8 or latin1)")),
            },
            "note" => {}
            _ => problems.push(format!("{at}: unknown header `{key}:`")),
        }
    }
    let first_line = lines.first().map_or(0, |&(n, _)| n);
    let expect = match join_headers(headers) {
        Ok(expect) => expect,
        // A header it needs could not be read: that is reported already.
        Err(_) if bad_expect => None,
        Err(e) => {
            problems.push(format!("{name}:{first_line}: {e}"));
            bad_expect = true;
            None
        }
    };

    let body = &lines[body_start..];
    let end = body
        .iter()
        .rposition(|(_, line)| !line.trim().is_empty())
        .map_or(0, |i| i + 1);
    let body = &body[..end];
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
fn parse_expect(value: &str) -> Result<ExpectLine, String> {
    let mut words = value.split_whitespace();
    let kind = words.next().unwrap_or_default();
    let argument = words.next();
    if let Some(extra) = words.next() {
        return Err(format!("unexpected `{extra}` in `expect: {value}`"));
    }
    let action = match kind {
        "relay" => Action::Relay,
        "virtual" => Action::Virtual,
        "error" => {
            return match argument {
                Some(code) if code == SyntaxError::CODE.to_string() => {
                    Ok(ExpectLine::SyntaxError(SyntaxError::CODE))
                }
                Some("1235") => Ok(ExpectLine::SyntaxError(1235)),
                _ => Err(format!(
                "`expect: {value}`: the parsers give `error {}` or (stream filters) `error 1235`",
                SyntaxError::CODE
            )),
            }
        }
        _ => {
            return Err(format!(
                "`expect: {value}`: expected `relay <keyword>`, `virtual <keyword>` or `error 1064`"
            ))
        }
    };
    let Some(keyword) = argument else {
        return Err(format!("`expect: {value}`: the keyword is missing"));
    };
    let keyword = keyword.parse::<Keyword>().map_err(|e| e.to_string())?;
    Ok(ExpectLine::Classified { action, keyword })
}

/// Joins the `expect:` line with the headers it needs: `parse:` for `virtual`, `near:` and `line:` for
/// `error`, and none of them otherwise — so no virtual statement passes with its parse unchecked.
fn join_headers(headers: Headers) -> Result<Option<(String, Expect)>, String> {
    let Headers {
        expect,
        parse,
        near,
        line,
    } = headers;
    let Some((at, expect)) = expect else {
        return match (&parse, &near, &line) {
            (None, None, None) => Ok(None),
            _ => Err("`parse:`, `near:` or `line:` without an `expect:` line".to_owned()),
        };
    };
    let expect = match (expect, parse, near, line) {
        (
            ExpectLine::Classified {
                action: Action::Relay,
                keyword,
            },
            None,
            None,
            None,
        ) => Expect::Relay { keyword },
        (
            ExpectLine::Classified {
                action: Action::Virtual,
                keyword,
            },
            Some(parse),
            None,
            None,
        ) => Expect::Virtual { keyword, parse },
        (
            ExpectLine::Classified {
                action: Action::Virtual,
                ..
            },
            None,
            _,
            _,
        ) => return Err("`expect: virtual` needs a `parse:` line".to_owned()),
        (ExpectLine::SyntaxError(code), None, Some(near), Some(line)) => {
            Expect::SyntaxError { code, near, line }
        }
        (ExpectLine::SyntaxError(_), None, _, _) => {
            return Err("`expect: error 1064` needs a `near:` and a `line:` line".to_owned())
        }
        (
            ExpectLine::Classified {
                action: Action::Relay,
                ..
            },
            _,
            _,
            _,
        ) => return Err("`expect: relay` takes no `parse:`, `near:` or `line:`".to_owned()),
        (
            ExpectLine::Classified {
                action: Action::Virtual,
                ..
            },
            Some(_),
            _,
            _,
        ) => return Err("`expect: virtual` takes no `near:` or `line:`".to_owned()),
        (ExpectLine::SyntaxError(_), Some(_), _, _) => {
            return Err("`expect: error` takes no `parse:`".to_owned())
        }
    };
    Ok(Some((at, expect)))
}

/// Undoes the escapes of a `near:` value, which is one line: `\n`, `\r`, `\t` and `\\`.
fn unescape(value: &str) -> Result<String, String> {
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('t') => out.push('\t'),
            Some('\\') => out.push('\\'),
            other => {
                return Err(format!(
                    "`near: {value}`: unknown escape `\\{}` (write a backslash as `\\\\`)",
                    other.map(String::from).unwrap_or_default()
                ))
            }
        }
    }
    Ok(out)
}

/// A parse result in the form `parse:` lines write it: `stream [schema=S] table=T`, `ack [schema=S]
/// table=T ids=A|B|...` (ids as written in the statement), `set-workload`. A name with whitespace, `=`, `|`
/// or a backtick, or an empty one, is written backtick-quoted.
fn render(statement: &VirtualStatement) -> String {
    match statement {
        VirtualStatement::Stream {
            table: t,
            columns,
            condition,
        } => {
            let mut out = format!("stream {}", table(t));
            if let Some(columns) = columns {
                let names: Vec<String> = columns.iter().map(|c| name(c)).collect();
                out.push_str(&format!(" columns={}", names.join("|")));
            }
            if let Some(condition) = condition {
                out.push_str(&format!(" where={condition}"));
            }
            out
        }
        VirtualStatement::Ack { table: t, ids } => {
            let ids: Vec<&str> = ids.iter().map(|id| id.written()).collect();
            format!("ack {} ids={}", table(t), ids.join("|"))
        }
        VirtualStatement::SetWorkload => "set-workload".to_owned(),
        VirtualStatement::ShowMessageTables => "show-message-tables".to_owned(),
        VirtualStatement::Nack {
            table: t,
            ids,
            delay,
        } => {
            let ids: Vec<&str> = ids.iter().map(|id| id.written()).collect();
            let delay = delay.map_or(String::new(), |d| format!(" delay_ns={}", d.nanos));
            format!("nack {} ids={}{delay}", table(t), ids.join("|"))
        }
        VirtualStatement::Extend { table: t, ids, by } => {
            let ids: Vec<&str> = ids.iter().map(|id| id.written()).collect();
            format!(
                "extend {} ids={} by_ns={}",
                table(t),
                ids.join("|"),
                by.nanos
            )
        }
        VirtualStatement::Redrive { table: t, ids } => {
            let ids: Vec<&str> = ids.iter().map(|id| id.written()).collect();
            format!("redrive {} ids={}", table(t), ids.join("|"))
        }
    }
}

fn name(name: &str) -> String {
    let plain = !name.is_empty()
        && !name
            .chars()
            .any(|c| c.is_whitespace() || matches!(c, '=' | '|' | '`'));
    if plain {
        name.to_owned()
    } else {
        format!("`{}`", name.replace('`', "``"))
    }
}

fn table(table: &TableName) -> String {
    match &table.schema {
        Some(schema) => format!("schema={} table={}", name(schema), name(&table.name)),
        None => format!("table={}", name(&table.name)),
    }
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

/// Classifies (and for a virtual statement, parses) one case; a description of the mismatch, if any.
fn check(case: &Case) -> Option<String> {
    let got = classify(&case.sql);
    let shown = String::from_utf8_lossy(&case.sql);
    let location = &case.location;
    let (action, keyword) = match &case.expect {
        Expect::Relay { keyword } => (Action::Relay, Some(*keyword)),
        Expect::Virtual { keyword, .. } => (Action::Virtual, Some(*keyword)),
        // A malformed message statement is still the proxy's to answer (with the error).
        Expect::SyntaxError { .. } => (Action::Virtual, None),
    };
    if got.action != action || keyword.is_some_and(|k| k != got.keyword) {
        return Some(format!(
            "{location}: expected {} {}, got {} {} — {shown:?}",
            action_name(action),
            keyword.map_or("<any>".to_owned(), |k| k.to_string()),
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
            "{location}: keyword_offset {} does not point at `{}` — {shown:?}",
            got.keyword_offset, got.keyword
        ));
    }
    let parsed = match parse_stream_statement(&case.sql, Quoting::DEFAULT) {
        Some(Ok(statement)) => Ok(render_stream(&statement)),
        Some(Err(e)) => Err((e.code, e.near, e.line, e.message, None)),
        None => match parse_virtual(&case.sql) {
            Ok(statement) => Ok(render(&statement)),
            Err(e) => Err((
                SyntaxError::CODE,
                e.near.clone(),
                e.line,
                e.message(),
                Some(e.expects.is_some()),
            )),
        },
    };
    match (&case.expect, parsed) {
        (Expect::Relay { .. }, _) => None,
        (Expect::Virtual { parse, .. }, Ok(rendered)) => {
            (rendered != *parse).then(|| {
                format!("{location}: expected parse `{parse}`, got `{rendered}` — {shown:?}")
            })
        }
        (Expect::Virtual { parse, .. }, Err((_, near, line, _, _))) => Some(format!(
            "{location}: expected parse `{parse}`, got error near {near:?} at line {line} — {shown:?}"
        )),
        (
            Expect::SyntaxError { code, near, line },
            Err((got_code, got_near, got_line, message, expects)),
        ) => {
            // The message must be MariaDB's, with what the record says in it. msgproxy's own
            // statements also say how they are written ("msgproxy expects ...").
            let ours = matches!(
                got.keyword,
                Keyword::Stream | Keyword::Ack | Keyword::Nack | Keyword::Extend | Keyword::Redrive
            );
            let says_how = match expects {
                None => true,
                Some(has) => ours == message.contains("msgproxy expects ") && ours == has,
            };
            let message_ok = message.contains(&format!("near '{near}' at line {line}")) && says_how;
            (*code != got_code || got_near != *near || got_line != *line || !message_ok).then(|| {
                format!(
                    "{location}: expected error {code} near {near:?} at line {line}, got {got_code} near {got_near:?} at line {got_line} — {shown:?}"
                )
            })
        }
        (Expect::SyntaxError { near, line, .. }, Ok(rendered)) => Some(format!(
            "{location}: expected error near {near:?} at line {line}, got parse `{rendered}` — {shown:?}"
        )),
    }
}

/// An event-stream statement in the form `parse:` lines write it: `stream-group [schema=S] table=T
/// group=G [columns=A|B] [start=...] [filter=<canonical>]`, `ack-group ... group=G ids=1|2`,
/// `seek ... group=G to=...`, `drop-group ... group=G`, `show-stream-groups`.
fn render_stream(statement: &StreamStatement) -> String {
    fn start(s: &StartAt) -> String {
        match s {
            StartAt::Latest => "latest".to_owned(),
            StartAt::Earliest => "earliest".to_owned(),
            StartAt::Timestamp(t) => format!("timestamp:{t}"),
            StartAt::Event(n) => format!("event:{n}"),
        }
    }
    match statement {
        StreamStatement::Stream {
            columns,
            table: t,
            group,
            start: s,
            filter,
        } => {
            let mut out = format!("stream-group {} group={}", table(t), name(group));
            if let Some(columns) = columns {
                out.push_str(&format!(" columns={}", columns.join("|")));
            }
            if let Some(s) = s {
                out.push_str(&format!(" start={}", start(s)));
            }
            if let Some(f) = filter {
                out.push_str(&format!(" filter={}", f.canonical()));
            }
            out
        }
        StreamStatement::Ack {
            table: t,
            group,
            ids,
        } => {
            let ids: Vec<String> = ids.iter().map(u64::to_string).collect();
            format!(
                "ack-group {} group={} ids={}",
                table(t),
                name(group),
                ids.join("|")
            )
        }
        StreamStatement::Seek {
            table: t,
            group,
            to,
        } => {
            format!("seek {} group={} to={}", table(t), name(group), start(to))
        }
        StreamStatement::DropGroup { table: t, group } => {
            format!("drop-group {} group={}", table(t), name(group))
        }
        StreamStatement::ShowGroups => "show-stream-groups".to_owned(),
    }
}

fn action_name(action: Action) -> &'static str {
    match action {
        Action::Relay => "relay",
        Action::Virtual => "virtual",
    }
}
