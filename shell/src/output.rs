//! What commands produce, and how it is printed: a small output model rendered either as a
//! table for people (comfy-table) or as JSON for programs (each command's `result` in the
//! `--json` stream, see `Context::emit`).
//!
//! Commands never print; they return an [`Output`], so every command gets both renderings and
//! the same stable field names. In JSON, addresses are always `"0x..."` strings and sizes and
//! counts always numbers.

use comfy_table::{presets, Attribute, Cell as TableCell, CellAlignment, ContentArrangement};
use serde_json::{json, Map, Value};

/// One value in a table or record.
#[derive(Clone, Debug, PartialEq)]
pub enum Cell {
    Text(String),
    /// An address, shown and serialized as `0x...`.
    Addr(u64),
    /// A size or count.
    Num(u64),
    /// A symbol a branch or operand reaches: `<malloc@plt>` in tables, plain in JSON.
    Symbol(String),
    /// A list of words (`symtab, eh_frame`); a JSON array.
    List(Vec<String>),
    /// Nothing known; `-` in tables, `null` in JSON.
    Empty,
}

impl Cell {
    pub fn text(s: impl Into<String>) -> Cell {
        Cell::Text(s.into())
    }

    /// `Text` when `s` is `Some`, else `Empty`.
    pub fn opt(s: Option<impl Into<String>>) -> Cell {
        s.map_or(Cell::Empty, |s| Cell::Text(s.into()))
    }

    fn display(&self) -> String {
        match self {
            Cell::Text(s) => s.clone(),
            Cell::Addr(a) => format!("{a:#x}"),
            Cell::Num(n) => n.to_string(),
            Cell::Symbol(s) => format!("<{s}>"),
            Cell::List(l) if l.is_empty() => "-".into(),
            Cell::List(l) => l.join(", "),
            Cell::Empty => "-".into(),
        }
    }

    fn json(&self) -> Value {
        match self {
            Cell::Text(s) | Cell::Symbol(s) => json!(s),
            Cell::Addr(a) => json!(format!("{a:#x}")),
            Cell::Num(n) => json!(n),
            Cell::List(l) => json!(l),
            Cell::Empty => Value::Null,
        }
    }

    fn is_numeric(&self) -> bool {
        matches!(self, Cell::Num(_))
    }
}

/// Rows under named columns.
#[derive(Clone, Debug, PartialEq)]
pub struct Table {
    /// A line printed above the table (and `"title"` in JSON).
    pub title: Option<String>,
    /// Column headers; in JSON each becomes a key, lower-cased with spaces as `_`.
    pub columns: Vec<&'static str>,
    pub rows: Vec<Vec<Cell>>,
    /// A line printed below the table, e.g. that rows were left out (`"note"` in JSON).
    pub note: Option<String>,
}

impl Table {
    pub fn new(columns: Vec<&'static str>) -> Table {
        Table {
            title: None,
            columns,
            rows: Vec::new(),
            note: None,
        }
    }

    pub fn with_title(mut self, title: impl Into<String>) -> Table {
        self.title = Some(title.into());
        self
    }

    fn json_rows(&self) -> Value {
        let keys: Vec<String> = self.columns.iter().map(|c| json_key(c)).collect();
        Value::Array(
            self.rows
                .iter()
                .map(|row| {
                    Value::Object(
                        keys.iter()
                            .cloned()
                            .zip(row.iter().map(Cell::json))
                            .collect(),
                    )
                })
                .collect(),
        )
    }
}

/// Key/value facts about one thing, optionally followed by a table (a struct's members).
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    pub title: Option<String>,
    pub fields: Vec<(&'static str, Cell)>,
    /// A table nested under the key given (`"members"`).
    pub table: Option<(&'static str, Table)>,
}

/// What a command produced.
#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    Table(Table),
    Record(Record),
    /// Free text (`echo`, `help`).
    Text(String),
    /// Several parts shown one after another (`cfg`: a summary, its blocks, its edges); in
    /// JSON one object with a key per part.
    Sections(Vec<(&'static str, Output)>),
    /// Nothing to show; `{}` in JSON so every command still prints one document.
    Nothing,
    /// A JSON document, printed as it is in both renderings (`report --json`).
    Json(Value),
}

/// How to print for people.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Style {
    /// Box borders and width-aware wrapping, for a terminal.
    pub terminal: bool,
    /// Bold headers and box-drawing borders; only on a terminal and never with `NO_COLOR`.
    pub colour: bool,
}

impl Style {
    /// The style for stdout as it is now.
    pub fn detect() -> Style {
        use std::io::IsTerminal;
        let terminal = std::io::stdout().is_terminal();
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        Style {
            terminal,
            colour: terminal && !no_color,
        }
    }

    /// Plain, stable text: what pipes and tests see.
    pub const PLAIN: Style = Style {
        terminal: false,
        colour: false,
    };
}

/// `Address` → `address`, `Name source` → `name_source`.
pub fn json_key(column: &str) -> String {
    column.to_lowercase().replace([' ', '-'], "_")
}

/// Renders `out` for people. The result ends with a newline unless it is empty.
pub fn render_text(out: &Output, style: Style) -> String {
    let mut s = match out {
        Output::Table(t) => render_table(t, style),
        Output::Record(r) => render_record(r, style),
        Output::Text(t) => t.clone(),
        Output::Json(v) => serde_json::to_string_pretty(v).unwrap_or_default() + "\n",
        Output::Sections(parts) => parts
            .iter()
            .map(|(_, part)| render_text(part, style))
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join("\n"),
        Output::Nothing => String::new(),
    };
    if !s.is_empty() && !s.ends_with('\n') {
        s.push('\n');
    }
    s
}

/// Renders `out` as one JSON document on one line.
pub fn render_json(out: &Output) -> String {
    json_value(out).to_string()
}

/// `out` as a JSON value (the `result` of a `--json` stream line).
pub fn json_value(out: &Output) -> Value {
    match out {
        Output::Table(t) => {
            let mut m = Map::new();
            if let Some(title) = &t.title {
                m.insert("title".into(), json!(title));
            }
            m.insert("rows".into(), t.json_rows());
            if let Some(note) = &t.note {
                m.insert("note".into(), json!(note));
            }
            Value::Object(m)
        }
        Output::Record(r) => {
            let mut m = Map::new();
            for (k, v) in &r.fields {
                m.insert(json_key(k), v.json());
            }
            if let Some((key, t)) = &r.table {
                m.insert((*key).into(), t.json_rows());
            }
            Value::Object(m)
        }
        Output::Text(t) => json!({ "text": t }),
        Output::Json(v) => v.clone(),
        Output::Sections(parts) => Value::Object(
            parts
                .iter()
                .map(|(key, part)| ((*key).to_owned(), json_value(part)))
                .collect(),
        ),
        Output::Nothing => json!({}),
    }
}

fn new_table(style: Style) -> comfy_table::Table {
    let mut t = comfy_table::Table::new();
    if style.terminal {
        // NO_COLOR users often want plain bytes too: ASCII borders for them.
        t.load_style(if style.colour {
            presets::UTF8_FULL_CONDENSED
        } else {
            presets::ASCII_FULL_CONDENSED
        });
        // Wrap to the terminal's width only when it reports a sensible one: a pty with no
        // size (0 columns) would otherwise squeeze every column to a single character.
        match crossterm::terminal::size() {
            Ok((width, _)) if width >= 40 => {
                t.set_width(width);
                t.set_content_arrangement(ContentArrangement::Dynamic);
            }
            _ => {
                t.set_content_arrangement(ContentArrangement::Disabled);
            }
        }
    } else {
        t.load_style(presets::NOTHING);
        t.set_content_arrangement(ContentArrangement::Disabled);
        t.force_no_tty();
    }
    if style.colour {
        t.enforce_styling();
    }
    t
}

fn header_cell(s: &str, style: Style) -> TableCell {
    let c = TableCell::new(s);
    if style.colour {
        c.add_attribute(Attribute::Bold)
    } else {
        c
    }
}

fn render_table(t: &Table, style: Style) -> String {
    let mut out = String::new();
    if let Some(title) = &t.title {
        out.push_str(title);
        out.push('\n');
    }
    if !t.rows.is_empty() {
        let mut table = new_table(style);
        table.set_header(t.columns.iter().map(|c| header_cell(c, style)));
        for row in &t.rows {
            table.add_row(row.iter().map(|c| {
                let cell = TableCell::new(c.display());
                if c.is_numeric() {
                    cell.set_alignment(CellAlignment::Right)
                } else {
                    cell
                }
            }));
        }
        if !style.terminal {
            // No border to pad against: columns start flush left, two spaces apart.
            for col in table.column_iter_mut() {
                col.set_padding((0, 2));
            }
        }
        out.push_str(&trim_lines(&table.to_string()));
        out.push('\n');
    }
    if let Some(note) = &t.note {
        out.push_str(note);
        out.push('\n');
    }
    out
}

fn render_record(r: &Record, style: Style) -> String {
    let mut out = String::new();
    if let Some(title) = &r.title {
        out.push_str(title);
        out.push('\n');
    }
    let width = r.fields.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (k, v) in &r.fields {
        let key = format!("{k:<width$}");
        let key = if style.colour {
            format!("\x1b[1m{key}\x1b[0m")
        } else {
            key
        };
        out.push_str(&format!("  {key}  {}\n", v.display()));
    }
    if let Some((key, t)) = &r.table {
        out.push_str(&format!("  {key}:\n"));
        out.push_str(&render_table(t, style));
    }
    out
}

/// Drops the trailing spaces the borderless preset leaves, so output diffs and greps cleanly.
fn trim_lines(s: &str) -> String {
    s.lines().map(str::trim_end).collect::<Vec<_>>().join("\n")
}

#[cfg(test)]
#[path = "output_tests.rs"]
mod tests;
