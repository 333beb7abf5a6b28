//! Issue 18 item 5: ChatGPT's `search` and `fetch`, driven with the requests ChatGPT sends
//! (`tools/call` with `{"query"}` or `{"id"}`) and checked against the shapes OpenAI documents
//! for deep research and company knowledge ("Building MCP servers for ChatGPT and API
//! integrations", https://platform.openai.com/docs/mcp): exactly one text content item whose
//! text is the JSON-encoded result object; here it also equals `structuredContent`. The
//! workspace is a real source tree: a copy of the runtime crate's `src`.

use std::{
    os::unix::ffi::OsStrExt,
    path::{Path, PathBuf},
};

use runtime::{limits::KNOWLEDGE_SEARCH_RESULTS_MAX, limits::RESULT_TEXT_DEFAULT_CHARS};
use serde_json::{Value, json};

use super::util::{Server, Tree, parse_reply};

/// `search`'s result as documented: `{"results": [{"id", "title", "url"}]}`, nothing else.
fn search_schema() -> Value {
    json!({
        "type": "object",
        "required": ["results"],
        "additionalProperties": false,
        "properties": {"results": {"type": "array", "items": {
            "type": "object",
            "required": ["id", "title", "url"],
            "additionalProperties": false,
            "properties": {
                "id": {"type": "string", "minLength": 1},
                "title": {"type": "string", "minLength": 1},
                "url": {"type": "string", "minLength": 1}
            }
        }}}
    })
}

/// `fetch`'s result as documented: `{"id", "title", "text", "url", "metadata"}`, `metadata`
/// an optional object of string values.
fn fetch_schema() -> Value {
    json!({
        "type": "object",
        "required": ["id", "title", "text", "url"],
        "additionalProperties": false,
        "properties": {
            "id": {"type": "string", "minLength": 1},
            "title": {"type": "string", "minLength": 1},
            "text": {"type": "string"},
            "url": {"type": "string", "minLength": 1},
            "metadata": {"type": "object", "additionalProperties": {"type": "string"}}
        }
    })
}

fn assert_valid(schema: &Value, v: &Value) {
    let validator = jsonschema::validator_for(schema).expect("the schema compiles");
    let errors: Vec<String> = validator.iter_errors(v).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{errors:?}\n{v}");
}

/// A call as ChatGPT makes it, and what ChatGPT requires of the answer: not an error, exactly
/// one content item, of type text, whose text parses as JSON matching the documented schema;
/// here also: equal to `structuredContent`, valid against the tool's declared output schema,
/// and within the result size bound. Returns the parsed object.
fn chatgpt(s: &mut Server, tool: &str, args: Value) -> Value {
    let resp = s.request("tools/call", json!({"name": tool, "arguments": args}));
    let result = &resp["result"];
    assert_ne!(result["isError"], json!(true), "{tool} {args}: {resp}");
    let content = result["content"].as_array().expect("content");
    assert_eq!(content.len(), 1, "exactly one content item: {resp}");
    assert_eq!(content[0]["type"], "text");
    let text = content[0]["text"].as_str().expect("a text item");
    assert!(
        text.len() <= RESULT_TEXT_DEFAULT_CHARS,
        "{tool}: {} characters",
        text.len()
    );
    let v: Value = serde_json::from_str(text).expect("the text is JSON-encoded");
    // In the documented order (JSON objects are unordered, but people read this text too).
    let first_key = if tool == "search" {
        "{\"results\":"
    } else {
        "{\"id\":"
    };
    assert!(
        text.starts_with(first_key),
        "{}",
        &text[..text.len().min(200)]
    );
    let documented = if tool == "search" {
        search_schema()
    } else {
        fetch_schema()
    };
    assert_valid(&documented, &v);
    assert_eq!(
        result["structuredContent"], v,
        "structuredContent is the same object"
    );
    v
}

/// An error result of a call: its error object (code first, checked by `parse_reply`).
fn refused(s: &mut Server, tool: &str, args: Value) -> Value {
    let resp = s.request("tools/call", json!({"name": tool, "arguments": args}));
    let r = parse_reply(&resp, None);
    assert!(r.is_error, "{tool} {args} succeeded: {resp}");
    r.error
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let t = e.file_type().unwrap();
        let dest = to.join(e.file_name());
        if t.is_dir() {
            copy_tree(&e.path(), &dest);
        } else if t.is_file() {
            std::fs::copy(e.path(), &dest).unwrap();
        }
    }
}

/// A workspace holding a copy of the runtime's `src` under `src/`, a `.gitignore` that hides
/// `notes/private.md`, a Markdown file with a heading, and a `.git` directory.
fn source_tree() -> Tree {
    let t = Tree::new();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../runtime/src");
    copy_tree(&src, &t.path().join("src"));
    t.write(".gitignore", "notes/private.md\n");
    t.write("notes/private.md", "# Private\nzanzibarquokka\n");
    t.write(".git/HEAD", "zanzibarquokka\n");
    t.write(
        "notes/public.md",
        "Intro line\n\n# Public notes\n\nThe public zanzibar notes.\n",
    );
    t
}

/// Every file under `dir`, relative to `root`.
fn files_under(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            files_under(root, &e.path(), out);
        } else {
            out.push(e.path().strip_prefix(root).unwrap().to_owned());
        }
    }
}

fn ids(v: &Value) -> Vec<String> {
    v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn the_pair_is_listed_with_chatgpts_argument_shapes_for_every_profile() {
    let t = Tree::new();
    for profile in ["full", "review"] {
        let mut s = Server::start(t.path(), &["--profile", profile]);
        let list = s.request("tools/list", json!({}));
        let tools = list["result"]["tools"].as_array().unwrap();
        let tool = |name: &str| {
            tools
                .iter()
                .find(|t| t["name"] == name)
                .unwrap_or_else(|| panic!("{profile} lists {name}"))
                .clone()
        };
        for (name, arg, example) in [
            (
                "search",
                "query",
                // OpenAI's example of a search result.
                json!({"results": [{"id": "doc-1", "title": "Q3 plan",
                                    "url": "https://example.com/q3"}]}),
            ),
            (
                "fetch",
                "id",
                json!({"id": "doc-1", "title": "Q3 plan", "text": "Full text",
                       "url": "https://example.com/q3", "metadata": {"source": "x"}}),
            ),
        ] {
            let t = tool(name);
            let input = &t["inputSchema"];
            let props: Vec<&String> = input["properties"].as_object().unwrap().keys().collect();
            assert_eq!(props, [arg], "{name} takes one argument");
            assert_eq!(input["required"], json!([arg]));
            assert_eq!(input["properties"][arg]["type"], "string");
            assert_eq!(t["annotations"]["readOnlyHint"], true, "{name}");
            assert_eq!(t["annotations"]["destructiveHint"], false, "{name}");
            // The declared output schema takes the documented shape.
            assert_valid(&t["outputSchema"], &example);
            let d = t["description"].as_str().unwrap();
            assert!(
                d.contains("deep research") && d.len() < 1_000,
                "{name}: {d}"
            );
        }
    }
}

#[test]
fn search_ranks_a_file_that_names_the_query_in_its_path_first_and_fetch_returns_each_file() {
    let t = source_tree();
    let mut s = Server::start(t.path(), &[]);
    let first = chatgpt(&mut s, "search", json!({"query": "stdio framing"}));
    let found = ids(&first);
    assert_eq!(
        found.first().map(String::as_str),
        Some("src/mcp/stdio/framing.rs"),
        "{first}"
    );
    assert!(found.len() > 1 && found.len() <= KNOWLEDGE_SEARCH_RESULTS_MAX);
    assert_eq!(
        chatgpt(&mut s, "search", json!({"query": "stdio framing"})),
        first,
        "the same query ranks the same way"
    );
    for r in first["results"].as_array().unwrap() {
        let id = r["id"].as_str().unwrap();
        assert_eq!(r["url"], format!("machine://workspace/{id}"), "{r}");
        assert_eq!(r["title"], id, "a Rust file's title is its path");
        let doc = chatgpt(&mut s, "fetch", json!({"id": id}));
        let on_disk = String::from_utf8(t.read(id)).unwrap();
        let text = doc["text"].as_str().unwrap();
        let m = &doc["metadata"];
        assert_eq!((&doc["id"], &doc["url"]), (&r["id"], &r["url"]));
        assert_eq!(m["bytes"], on_disk.len().to_string(), "{id}");
        if m["truncated"] == "false" {
            assert_eq!(text, on_disk, "{id}");
        } else {
            assert!(on_disk.starts_with(text) && text.ends_with('\n'), "{id}");
        }
        assert_eq!(m["lines"], text.lines().count().to_string(), "{id}");
    }
    // The url form is taken back.
    let url = first["results"][0]["url"].as_str().unwrap();
    let by_url = chatgpt(&mut s, "fetch", json!({"id": url}));
    assert_eq!(by_url["id"], "src/mcp/stdio/framing.rs");

    // Terms in the file name rank before terms only in a directory name or in the text.
    let mut all = Vec::new();
    files_under(t.path(), &t.path().join("src"), &mut all);
    let named = all
        .iter()
        .filter(|p| p.file_name().unwrap().to_string_lossy().contains("engine"))
        .count();
    assert!(named > 3 && named < KNOWLEDGE_SEARCH_RESULTS_MAX, "{named}");
    let ranked = ids(&chatgpt(&mut s, "search", json!({"query": "Engine"})));
    assert_eq!(ranked.len(), KNOWLEDGE_SEARCH_RESULTS_MAX);
    for (i, id) in ranked.iter().enumerate() {
        let name = Path::new(id).file_name().unwrap().to_string_lossy();
        assert_eq!(name.contains("engine"), i < named, "{i}: {id}\n{ranked:?}");
    }
    // A common word: at most the maximum.
    let many = ids(&chatgpt(&mut s, "search", json!({"query": "fn"})));
    assert_eq!(many.len(), KNOWLEDGE_SEARCH_RESULTS_MAX);
}

#[test]
fn ignored_files_and_git_internals_are_not_found_and_markdown_has_its_heading_as_title() {
    let t = source_tree();
    let mut s = Server::start(t.path(), &[]);
    let r = chatgpt(&mut s, "search", json!({"query": "zanzibarquokka"}));
    assert_eq!(
        r,
        json!({"results": []}),
        "the .gitignored file and .git are skipped"
    );
    let r = chatgpt(&mut s, "search", json!({"query": "the public zanzibar"}));
    assert_eq!(
        r["results"][0],
        json!({"id": "notes/public.md", "title": "Public notes — notes/public.md",
               "url": "machine://workspace/notes/public.md"})
    );
    let doc = chatgpt(&mut s, "fetch", json!({"id": "notes/public.md"}));
    assert_eq!(doc["title"], "Public notes — notes/public.md");
    assert_eq!(
        doc["metadata"],
        json!({"bytes": "55", "lines": "5", "truncated": "false"})
    );
}

#[test]
fn a_path_that_is_not_utf8_round_trips_through_id_and_url() {
    let t = Tree::new();
    let name = std::ffi::OsStr::from_bytes(b"caf\xe9 notes.txt");
    std::fs::write(t.path().join(name), "zanzibar here\n").unwrap();
    let mut s = Server::start(t.path(), &["--profile", "review"]);
    let r = chatgpt(&mut s, "search", json!({"query": "zanzibar"}));
    assert_eq!(
        r["results"][0],
        json!({"id": "\"caf\\xe9 notes.txt\"", "title": "\"caf\\xe9 notes.txt\"",
               "url": "machine://workspace/caf%E9%20notes.txt"})
    );
    for id in [
        "\"caf\\xe9 notes.txt\"",
        "machine://workspace/caf%E9%20notes.txt",
    ] {
        let doc = chatgpt(&mut s, "fetch", json!({"id": id}));
        assert_eq!(doc["text"], "zanzibar here\n", "{id}");
        assert_eq!(doc["id"], "\"caf\\xe9 notes.txt\"");
    }
}

#[test]
fn a_large_file_is_cut_after_a_line_within_the_bound_and_read_file_continues_it() {
    let t = Tree::new();
    let big: String = (1..=100_000)
        .map(|i| format!("line {i:06} \"quoted\" and\ta tab\n"))
        .collect();
    t.write("logs/big.log", &big);
    // Control characters take six characters each in JSON.
    let ctrl = "\u{1}\u{2}\u{3}\\\n".repeat(20_000);
    t.write("logs/ctrl.txt", &ctrl);
    let mut s = Server::start(t.path(), &["--profile", "review"]);
    let doc = chatgpt(&mut s, "fetch", json!({"id": "logs/big.log"}));
    let text = doc["text"].as_str().unwrap();
    let m = &doc["metadata"];
    assert_eq!(m["truncated"], "true");
    assert_eq!(m["bytes"], big.len().to_string());
    assert!(big.starts_with(text) && text.ends_with('\n'));
    let lines = text.lines().count();
    assert_eq!(m["lines"], lines.to_string());
    assert!(lines > 500, "the bound is used: {lines} lines");
    let next = lines + 1;
    assert_eq!(m["next_start_line"], next.to_string());
    assert!(m["read_rest"].as_str().unwrap().contains("read_file"));
    let rest = s.call(
        "read_file",
        json!({"path": doc["id"], "start_line": next, "end_line": next}),
    );
    assert_eq!(
        rest.ok()["content"],
        format!("line {next:06} \"quoted\" and\ta tab\n")
    );
    // The cursor continues at the same place.
    assert_eq!(m.get("cut_line"), None);
    let rest = s.call(
        "read_file",
        json!({"path": doc["id"], "cursor": m["next_cursor"], "max_bytes": 100}),
    );
    assert!(
        rest.ok()["content"]
            .as_str()
            .unwrap()
            .starts_with(&format!("line {next:06} ")),
        "{}",
        rest.text
    );

    let doc = chatgpt(&mut s, "fetch", json!({"id": "logs/ctrl.txt"}));
    let text = doc["text"].as_str().unwrap();
    assert_eq!(doc["metadata"]["truncated"], "true");
    assert!(ctrl.starts_with(text) && text.ends_with('\n') && text.len() > 1_000);
}

#[test]
fn a_reviewer_cannot_fetch_outside_the_workspace_but_the_owner_can() {
    let parent = tempfile::tempdir().unwrap();
    let ws = parent.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let outside = parent.path().join("outside.txt");
    std::fs::write(&outside, "outside secret\n").unwrap();
    std::os::unix::fs::symlink(&outside, ws.join("link.txt")).unwrap();
    std::fs::write(ws.join("inside.txt"), "inside secret\n").unwrap();
    let abs = outside.to_str().unwrap().to_owned();

    let mut s = Server::start(&ws, &["--profile", "review"]);
    for id in [
        "../outside.txt".to_owned(),
        abs.clone(),
        "link.txt".to_owned(),
        "machine://workspace/..%2Foutside.txt".to_owned(),
        "machine://workspace/../outside.txt".to_owned(),
        format!("file://{abs}"),
    ] {
        let e = refused(&mut s, "fetch", json!({"id": id}));
        assert_eq!(e["code"], "path_boundary", "{id}: {e}");
        assert!(!e.to_string().contains("outside secret"));
    }
    // search works for a reviewer and never lists the symlink.
    let r = chatgpt(&mut s, "search", json!({"query": "secret"}));
    assert_eq!(ids(&r), ["inside.txt"]);

    let mut s = Server::start(&ws, &["--profile", "full"]);
    let doc = chatgpt(&mut s, "fetch", json!({"id": abs}));
    assert_eq!(doc["text"], "outside secret\n");
    let canonical = std::fs::canonicalize(&outside).unwrap();
    assert_eq!(doc["url"], format!("file://{}", canonical.display()));
    let r = chatgpt(&mut s, "search", json!({"query": "secret"}));
    assert_eq!(ids(&r), ["inside.txt"], "ids stay workspace-relative");
}

#[test]
fn binary_missing_directory_and_malformed_requests_get_clear_errors() {
    let t = Tree::new();
    t.write("assets/blob.bin", b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR");
    t.write("src/a.rs", "fn a() {}\n");
    let mut s = Server::start(t.path(), &["--profile", "review"]);
    let e = refused(&mut s, "fetch", json!({"id": "assets/blob.bin"}));
    assert_eq!(e["code"], "invalid_request");
    assert!(e["message"].as_str().unwrap().contains("binary"), "{e}");
    let e = refused(&mut s, "fetch", json!({"id": "src/missing.rs"}));
    assert_eq!(e["code"], "not_found", "{e}");
    let e = refused(
        &mut s,
        "fetch",
        json!({"id": "machine://workspace/src/missing.rs"}),
    );
    assert_eq!(e["code"], "not_found", "{e}");
    let e = refused(&mut s, "fetch", json!({"id": "src"}));
    assert_eq!(e["code"], "invalid_request", "{e}");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("not a regular file")
    );
    for args in [
        json!({"id": ""}),
        json!({}),
        json!({"id": "src/a.rs", "x": 1}),
    ] {
        let e = refused(&mut s, "fetch", args.clone());
        assert_eq!(e["code"], "invalid_request", "{args}: {e}");
    }
    for args in [
        json!({"query": ""}),
        json!({"query": " \t\n"}),
        json!({}),
        json!({"query": "a", "limit": 3}),
        json!({"query": "x".repeat(2_000)}),
    ] {
        let e = refused(&mut s, "search", args.clone());
        assert_eq!(e["code"], "invalid_request", "{e}");
    }
    // Bytes that are not UTF-8 are replaced, and the metadata says so.
    t.write("latin1.txt", b"caf\xe9\n");
    let doc = chatgpt(&mut s, "fetch", json!({"id": "latin1.txt"}));
    assert_eq!(doc["text"], "caf\u{fffd}\n");
    assert!(doc["metadata"]["invalid_utf8"].is_string(), "{doc}");
    // The binary file is not a search result either.
    let r = chatgpt(&mut s, "search", json!({"query": "IHDR"}));
    assert_eq!(ids(&r), Vec::<String>::new());
}

#[test]
fn search_never_returns_a_binary_file_not_even_one_whose_path_matches_and_still_fills_its_results()
{
    let t = Tree::new();
    // Compiled Python: a `.pyc` header has NUL bytes in its first eight.
    let pyc = b"\xa7\r\r\n\0\0\0\0\x12\x34\x56\x78decoder JSONDecoder";
    for i in 0..30 {
        t.write(
            &format!("json/__pycache__/decoder{i:02}.cpython-311.pyc"),
            pyc.as_slice(),
        );
    }
    for i in 0..25 {
        t.write(&format!("json/decoder{i:02}.py"), "pass\n");
    }
    t.write("bin.dat", b"\0\x01\x02decoder".as_slice());
    // Text first, a NUL later but within what fetch reads: fetch refuses it, so search must not
    // offer it, although 500 of its lines match (it would rank first).
    let mut late = b"decoder notes\n".repeat(500);
    late.extend_from_slice(b"\0tail\n");
    t.write("decoder_late.txt", late);
    t.write("notes.txt", "remove the pyc files first\n");
    let mut s = Server::start(t.path(), &["--profile", "review"]);

    let found = ids(&chatgpt(&mut s, "search", json!({"query": "decoder"})));
    assert_eq!(found.len(), KNOWLEDGE_SEARCH_RESULTS_MAX, "{found:?}");
    let expected: Vec<String> = (0..KNOWLEDGE_SEARCH_RESULTS_MAX)
        .map(|i| format!("json/decoder{i:02}.py"))
        .collect();
    assert_eq!(
        found, expected,
        "the text files fill the results, in rank order"
    );
    for id in &found {
        chatgpt(&mut s, "fetch", json!({"id": id}));
    }
    assert_eq!(
        ids(&chatgpt(&mut s, "search", json!({"query": "pyc"}))),
        ["notes.txt"]
    );
    assert_eq!(
        ids(&chatgpt(&mut s, "search", json!({"query": "bin.dat"}))),
        Vec::<String>::new()
    );
    assert_eq!(
        ids(&chatgpt(&mut s, "search", json!({"query": "decoder_late"}))),
        Vec::<String>::new()
    );
    let e = refused(&mut s, "fetch", json!({"id": "decoder_late.txt"}));
    assert!(e["message"].as_str().unwrap().contains("binary"), "{e}");
}

#[test]
fn fetch_of_one_long_line_gives_a_read_file_cursor_that_continues_inside_it() {
    let t = Tree::new();
    // A BOM, a 200 KB line of multi-byte characters, no line break at the end.
    let line: String = (0..100_000)
        .map(|i| if i % 7 == 0 { 'é' } else { 'x' })
        .collect();
    let mut bytes = b"\xEF\xBB\xBF".to_vec();
    bytes.extend_from_slice(line.as_bytes());
    t.write("oneline.txt", bytes);
    let mut s = Server::start(t.path(), &["--profile", "review"]);
    let doc = chatgpt(&mut s, "fetch", json!({"id": "oneline.txt"}));
    let text = doc["text"].as_str().unwrap();
    let m = &doc["metadata"];
    assert_eq!(m["truncated"], "true", "{m}");
    assert!(line.starts_with(text) && text.len() > 10_000, "{m}");
    assert_eq!(m["lines"], "1");
    assert_eq!(m["cut_line"], "1", "{m}");
    // There is no whole line to start at: a start line would repeat what was shown.
    assert!(m.get("next_start_line").is_none(), "{m}");
    let cursor = m["next_cursor"].as_str().expect("a next_cursor");
    assert!(m["read_rest"].as_str().unwrap().contains("cursor"), "{m}");
    // read_file, page by page from the cursor, gives exactly the rest.
    let mut read = text.to_owned();
    let mut next = Some(cursor.to_owned());
    while let Some(c) = next.take() {
        let r = s.call("read_file", json!({"path": doc["id"], "cursor": c}));
        let out = r.ok();
        read.push_str(out["content"].as_str().unwrap());
        next = out["next_cursor"].as_str().map(str::to_owned);
    }
    assert_eq!(read.len(), line.len());
    assert!(
        read == line,
        "fetch and read_file together give the file once"
    );
}
