//! The explicit targets of a makefile, read the way GNU make reads rule lines (GNU make manual
//! §3.7 "How make Reads a Makefile", §4.2 "Rule Syntax", §6.5 "Setting Variables"), without
//! evaluating anything: a target whose name needs expansion (`$(OUT)/x`) is not one a caller
//! can name, so it is left out.
//!
//! Kept: every name before the rule's `:` (or `::`), in order of first appearance. Left out:
//! recipe lines (a leading tab), comments, variable assignments (`=`, `:=`, `::=`, `:::=`,
//! `?=`, `+=`, `!=`, also after `export`/`override`), `define … endef` bodies, directives
//! (`include`, conditionals, `vpath`, ...), pattern rules (`%`), special and suffix targets and
//! every other name starting with `.` (`.PHONY`, `.c.o`), names with a variable reference,
//! wildcard or archive member (`$`, `*`, `?`, `[`, `(`).

/// Directives: a line whose first word is one of these declares no rule.
const DIRECTIVES: &[&str] = &[
    "include", "-include", "sinclude", "ifeq", "ifneq", "ifdef", "ifndef", "else", "endif",
    "export", "unexport", "override", "private", "vpath", "undefine", "load", "-load",
];

/// The explicit targets of `text` (a makefile), in order of first appearance, each once.
pub(crate) fn targets(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut defines = 0usize;
    for line in logical_lines(text) {
        if line.starts_with('\t') {
            continue;
        }
        let line = strip_comment(&line);
        let mut words = line.split_whitespace();
        let Some(first) = words.next() else { continue };
        let opens_define = first == "define"
            || (matches!(first, "override" | "export" | "private")
                && words.next() == Some("define"));
        if defines > 0 {
            if opens_define {
                defines += 1;
            } else if first == "endef" {
                defines -= 1;
            }
            continue;
        }
        if opens_define {
            defines += 1;
            continue;
        }
        if DIRECTIVES.contains(&first) {
            continue;
        }
        let Some(colon) = rule_colon(line) else {
            continue;
        };
        for name in line[..colon].split_whitespace() {
            let explicit =
                !name.starts_with('.') && !name.contains(['%', '$', '*', '?', '[', '(', '\\']);
            if explicit && seen.insert(name.to_owned()) {
                out.push(name.to_owned());
            }
        }
    }
    out
}

/// The makefile's logical lines: physical lines (LF or CRLF) joined where a line ends in an
/// odd number of backslashes (§3.1.1 "Splitting Long Lines").
fn logical_lines(text: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut cur = String::new();
    let mut continued = false;
    for raw in text.split('\n') {
        let raw = raw.strip_suffix('\r').unwrap_or(raw);
        let trailing = raw.len() - raw.trim_end_matches('\\').len();
        let joins = trailing % 2 == 1;
        let body = if joins { &raw[..raw.len() - 1] } else { raw };
        if continued {
            cur.push(' ');
            cur.push_str(body.trim_start());
        } else {
            cur.push_str(body);
        }
        continued = joins;
        if !joins {
            lines.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        lines.push(cur);
    }
    lines
}

/// `line` up to its first `#` that is not escaped as `\#`.
fn strip_comment(line: &str) -> &str {
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'#' => return &line[..i],
            _ => i += 1,
        }
    }
    line
}

/// Where the rule's `:` is when `line` is a rule: the first `:` or `=` outside a variable
/// reference (`$(...)`, `${...}`) is a `:` that does not start an assignment operator.
fn rule_colon(line: &str) -> Option<usize> {
    let bytes = line.as_bytes();
    let mut depth = 0usize;
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'(' | b'{' if i > 0 && (bytes[i - 1] == b'$' || depth > 0) => depth += 1,
            b')' | b'}' if depth > 0 => depth -= 1,
            b'=' if depth == 0 => return None,
            b':' if depth == 0 => {
                let rest = &line[i..];
                let assignment =
                    rest.starts_with(":=") || rest.starts_with("::=") || rest.starts_with(":::=");
                return (!assignment).then_some(i);
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_targets_only() {
        let text = "\
# A comment: not a rule
CC = gcc
FLAGS := -O2
NEXT ::= x
OPT ?= y
MORE += z
SH != echo hi
export PATH := /bin:$(PATH)
override X = a:b
.PHONY: all test clean
.DEFAULT_GOAL := all
.c.o:
\t$(CC) -c $<

all: build test ## the default
build:
\tcargo build # recipe: not:a:target
test check: build
\tcargo test
%.o: %.c
\t$(CC) $<
$(OUT)/bin: main.o
lib.a(member.o): x
*.tmp:
dist/app.tar: build
clean::
\trm -rf target
debug: CFLAGS += -g
define RECIPE =
inner: not a target
endef
ifeq ($(OS),Linux)
linux-only: ; echo linux
endif
include other.mk
long-one \\
  long-two: x
";
        assert_eq!(
            targets(text),
            [
                "all",
                "build",
                "test",
                "check",
                "dist/app.tar",
                "clean",
                "debug",
                "linux-only",
                "long-one",
                "long-two",
            ]
        );
    }

    #[test]
    fn crlf_escaped_hashes_and_nested_defines() {
        let text = "a: b\r\nx\\#y: z\r\ndefine A\r\ndefine B\r\nno:\r\nendef\r\nstill-no:\r\nendef\r\nyes:\r\n";
        assert_eq!(targets(text), ["a", "yes"]);
        assert!(targets("").is_empty());
    }
}
