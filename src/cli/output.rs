//! What the operator commands print: aligned tables for people, JSON for scripts.

use super::args::Format;
use serde_json::Value;

/// A table: a header row and rows of the same width.
pub struct Table {
    header: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&'static str]) -> Table {
        Table {
            header: header.to_vec(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        assert_eq!(
            cells.len(),
            self.header.len(),
            "a row as wide as the header"
        );
        self.rows.push(cells);
    }

    /// Columns padded to their widest cell, two spaces apart; the last one unpadded.
    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.len()).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let header: Vec<String> = self.header.iter().map(|h| h.to_string()).collect();
        let mut out = String::new();
        for row in std::iter::once(&header).chain(&self.rows) {
            let mut line = String::new();
            for (i, (cell, w)) in row.iter().zip(&widths).enumerate() {
                if i + 1 == row.len() {
                    line.push_str(cell);
                } else {
                    line.push_str(&format!("{cell:<w$}  "));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// Prints `json` (pretty) or the table `table` builds, as `format` asks.
pub fn print(format: Format, json: &Value, table: impl FnOnce() -> String) {
    match format {
        Format::Json => println!(
            "{}",
            serde_json::to_string_pretty(json).expect("JSON values serialize")
        ),
        Format::Table => print!("{}", table()),
    }
}

/// A list of broker ids as a table cell: "1,2,3".
pub fn ids(ids: &[i32]) -> String {
    ids.iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_to_the_widest_cell() {
        let mut t = Table::new(&["NAME", "PARTITIONS"]);
        t.row(vec!["orders".into(), "6".into()]);
        t.row(vec!["a".into(), "12".into()]);
        assert_eq!(t.render(), "NAME    PARTITIONS\norders  6\na       12\n");
    }
}
