//! Issue 18: skills (see the module of the same name in the runtime): `list_skills` and
//! `load_skill` over real skill roots, driven through the real binary.

use std::path::Path;

use serde_json::{Value, json};

use crate::util::{Server, Tree};

/// Writes a bundle `dir` whose SKILL.md names `name` and `description`, with `body` after it.
fn skill(t: &Tree, dir: &str, name: &str, description: &str, body: &str) {
    t.write(
        &format!("{dir}/SKILL.md"),
        format!("---\nname: {name}\ndescription: {description}\n---\n{body}"),
    );
}

fn names(out: &Value) -> Vec<String> {
    out["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_owned())
        .collect()
}

fn skill_named<'a>(out: &'a Value, name: &str) -> &'a Value {
    out["skills"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no skill {name} in {out}"))
}

fn problem_at<'a>(out: &'a Value, path: &str) -> &'a Value {
    out["problems"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["path"] == path)
        .unwrap_or_else(|| panic!("no problem at {path} in {out}"))
}

/// A home directory with one user-level skill, `personal`.
fn home_with_a_skill() -> tempfile::TempDir {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join(".claude/skills/personal");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("SKILL.md"),
        "---\nname: personal\ndescription: The owner's own habits\n---\nPrivate.\n",
    )
    .unwrap();
    home
}

fn home_env(home: &Path) -> [(&str, &str); 1] {
    [("HOME", home.to_str().unwrap())]
}

#[test]
fn skills_of_every_root_are_listed_and_user_level_ones_only_for_unrestricted_callers() {
    let t = Tree::new();
    skill(&t, ".agents/skills/alpha", "alpha", "First skill", "A\n");
    skill(&t, ".claude/skills/beta", "beta", "Second skill", "B\n");
    skill(&t, ".codex/skills/gamma", "gamma", "Third skill", "C\n");
    // Files beside the bundles and directories without SKILL.md are not skills.
    t.write(".agents/skills/README.md", "not a skill\n");
    t.write(".agents/skills/shared/notes.md", "assets\n");
    let home = home_with_a_skill();
    let env = home_env(home.path());

    // The default stdio profile (full) has unrestricted paths: it sees the user's skills too,
    // after the project's. It shows absolute paths.
    let ws = t.path().canonicalize().unwrap();
    let abs = |rel: &str| ws.join(rel).to_str().unwrap().to_owned();
    let mut s = Server::start_with_env(t.path(), &[], &env);
    let r = s.call("list_skills", json!({}));
    let out = r.ok();
    assert_eq!(names(out), ["alpha", "beta", "gamma", "personal"]);
    let alpha = skill_named(out, "alpha");
    assert_eq!(alpha["path"], abs(".agents/skills/alpha"));
    assert_eq!(alpha["root"], abs(".agents/skills"));
    assert_eq!(alpha["scope"], "project");
    assert_eq!(skill_named(out, "gamma")["root"], abs(".codex/skills"));
    let personal = skill_named(out, "personal");
    assert_eq!(personal["scope"], "user");
    assert!(
        personal["path"]
            .as_str()
            .unwrap()
            .ends_with(".claude/skills/personal"),
        "{personal}"
    );
    assert_eq!(out["user_level"], true);
    assert_eq!(out["complete"], true);
    assert_eq!(out["problems"], json!([]));
    assert!(
        r.body().contains(&format!(
            "alpha — First skill ({})\n",
            abs(".agents/skills/alpha")
        )),
        "{}",
        r.text
    );
    assert!(r.summary().contains("4 skills"), "{}", r.summary());
    let p = s.call("load_skill", json!({"name": "personal"}));
    assert_eq!(p.ok()["scope"], "user");
    drop(s);

    // A caller confined to the workspace never sees them, nor learns their names.
    let mut s = Server::start_with_env(t.path(), &["--profile", "agent"], &env);
    let r = s.call("list_skills", json!({}));
    let out = r.ok();
    assert_eq!(names(out), ["alpha", "beta", "gamma"]);
    assert_eq!(skill_named(out, "alpha")["path"], ".agents/skills/alpha");
    assert_eq!(out["user_level"], false);
    assert!(!r.text.contains("personal"), "{}", r.text);
    let e = s.call("load_skill", json!({"name": "personal"}));
    assert_eq!(e.code(), "not_found");
    assert_eq!(e.error["available"], json!(["alpha", "beta", "gamma"]));
}

#[test]
fn broken_binary_and_non_utf8_skill_files_are_reported_and_the_others_listed() {
    let t = Tree::new();
    skill(&t, ".agents/skills/good", "good", "Works", "Fine.\n");
    t.write(
        ".agents/skills/broken/SKILL.md",
        "---\nname: [unclosed\ndescription: x\n---\n",
    );
    t.write(".claude/skills/plain/SKILL.md", "# No front matter\n");
    t.write(
        ".claude/skills/unterminated/SKILL.md",
        "---\nname: u\ndescription: x\n",
    );
    t.write(
        ".claude/skills/nameless/SKILL.md",
        "---\ndescription: x\n---\n",
    );
    t.write(
        ".codex/skills/binary/SKILL.md",
        b"---\nname: bin\0\0\x01\x02\n---\n".as_slice(),
    );
    t.write(
        ".codex/skills/latin1/SKILL.md",
        b"---\nname: caf\xe9\ndescription: x\n---\n".as_slice(),
    );
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    let r = s.call("list_skills", json!({}));
    let out = r.ok();
    assert_eq!(names(out), ["good"]);
    let kind = |path: &str| problem_at(out, path)["kind"].as_str().unwrap().to_owned();
    let reason = |path: &str| problem_at(out, path)["reason"].as_str().unwrap().to_owned();
    assert_eq!(kind(".agents/skills/broken/SKILL.md"), "front_matter");
    assert!(
        reason(".agents/skills/broken/SKILL.md").contains("at line "),
        "{out}"
    );
    assert!(
        reason(".claude/skills/plain/SKILL.md").contains("does not start with YAML front matter")
    );
    assert!(reason(".claude/skills/unterminated/SKILL.md").contains("not closed"));
    assert!(reason(".claude/skills/nameless/SKILL.md").contains("no `name`"));
    assert_eq!(kind(".codex/skills/binary/SKILL.md"), "binary");
    assert_eq!(kind(".codex/skills/latin1/SKILL.md"), "not_utf8");
    assert_eq!(out["problems"].as_array().unwrap().len(), 6);
    // The text names each problem under the skills.
    assert!(r.summary().contains("6 problems"), "{}", r.summary());
    assert!(
        r.body()
            .contains("problem (binary): .codex/skills/binary/SKILL.md: SKILL.md is binary"),
        "{}",
        r.text
    );
    // The good one still loads.
    assert_eq!(
        s.call("load_skill", json!({"name": "good"})).ok()["text"],
        "---\nname: good\ndescription: Works\n---\nFine.\n"
    );
}

#[test]
fn a_bundle_linked_out_of_the_workspace_is_refused_under_agent_and_followed_under_full() {
    let t = Tree::new();
    let outside = tempfile::tempdir().unwrap();
    // A skill's name is its directory's: the link keeps it.
    let ext = outside.path().join("external");
    std::fs::create_dir_all(&ext).unwrap();
    std::fs::write(
        ext.join("SKILL.md"),
        "---\nname: external\ndescription: Lives elsewhere\n---\nSECRET-INSTRUCTIONS\n",
    )
    .unwrap();
    std::fs::write(ext.join("notes.md"), "x").unwrap();
    skill(&t, ".agents/skills/local", "local", "Lives here", "L\n");
    std::fs::create_dir_all(t.path().join(".agents/skills")).unwrap();
    std::os::unix::fs::symlink(&ext, t.path().join(".agents/skills/external")).unwrap();
    // Only the entry point is a link out.
    std::fs::create_dir_all(t.path().join(".claude/skills/external")).unwrap();
    std::os::unix::fs::symlink(
        ext.join("SKILL.md"),
        t.path().join(".claude/skills/external/SKILL.md"),
    )
    .unwrap();
    // A link that stays inside the workspace is followed for every caller.
    skill(&t, "shared/inside", "inside", "Linked from inside", "I\n");
    std::fs::create_dir_all(t.path().join(".codex/skills")).unwrap();
    std::os::unix::fs::symlink(
        t.path().join("shared/inside"),
        t.path().join(".codex/skills/inside"),
    )
    .unwrap();

    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    let r = s.call("list_skills", json!({}));
    let out = r.ok();
    assert_eq!(names(out), ["local", "inside"]);
    assert_eq!(skill_named(out, "inside")["path"], ".codex/skills/inside");
    for path in [
        ".agents/skills/external",
        ".claude/skills/external/SKILL.md",
    ] {
        let p = problem_at(out, path);
        assert_eq!(p["kind"], "path_boundary", "{p}");
        assert!(
            p["reason"]
                .as_str()
                .unwrap()
                .contains("outside the workspace"),
            "{p}"
        );
    }
    assert!(!r.text.contains("SECRET") && !r.text.contains("Lives elsewhere"));
    let e = s.call("load_skill", json!({"name": "external"}));
    assert_eq!(e.code(), "not_found");
    assert!(!e.text.contains("SECRET"));
    drop(s);

    // The default profile (unrestricted paths, absolute output) follows both links; the
    // bundle is listed where it was found.
    let ws = t.path().canonicalize().unwrap();
    let abs = |rel: &str| ws.join(rel).to_str().unwrap().to_owned();
    let mut s = Server::start_with_env(t.path(), &[], &home_env(outside.path()));
    let out = s.call("list_skills", json!({})).ok().clone();
    assert_eq!(out["problems"], json!([]));
    assert_eq!(names(&out), ["external", "local", "inside"]);
    assert_eq!(
        skill_named(&out, "external")["path"],
        abs(".agents/skills/external")
    );
    // `.claude/skills/external` has the same name and a farther root: it is shadowed, not
    // listed twice.
    assert_eq!(
        out["shadowed"],
        json!([{"name": "external", "path": abs(".claude/skills/external"),
                "by": abs(".agents/skills/external")}])
    );
    let l = s.call("load_skill", json!({"name": "external"}));
    let loaded = l.ok();
    assert!(
        loaded["text"]
            .as_str()
            .unwrap()
            .contains("SECRET-INSTRUCTIONS")
    );
    let files: Vec<&str> = loaded["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(files, ["SKILL.md", "notes.md"]);
}

#[test]
fn a_skill_directory_with_100000_files_is_listed_and_loaded_within_bounds() {
    use runtime::{limits::SKILL_INVENTORY_MAX, limits::SKILL_SCAN_MAX_ENTRIES};
    let t = Tree::new();
    skill(
        &t,
        ".agents/skills/huge",
        "huge",
        "A bundle of many files",
        "Big.\n",
    );
    skill(
        &t,
        ".agents/skills/small",
        "small",
        "A small one",
        "Small.\n",
    );
    let dir = t.path().join(".agents/skills/huge");
    for i in 0..100_000 {
        std::fs::write(dir.join(format!("f{i:06}.txt")), "").unwrap();
    }
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    // Listing reads each bundle's SKILL.md only, never walks it.
    let out = s.call("list_skills", json!({})).ok().clone();
    assert_eq!(names(&out), ["huge", "small"]);
    assert_eq!(out["complete"], true);

    let r = s.call("load_skill", json!({"name": "huge"}));
    let loaded = r.ok();
    assert_eq!(
        loaded["text"],
        "---\nname: huge\ndescription: A bundle of many files\n---\nBig.\n"
    );
    assert_eq!(
        loaded["files"].as_array().unwrap().len(),
        SKILL_INVENTORY_MAX
    );
    assert_eq!(loaded["inventory_complete"], false);
    // The walk stopped at its entry bound instead of reading all 100,000 names.
    let seen = loaded["files_seen"].as_u64().unwrap();
    assert_eq!(seen, SKILL_SCAN_MAX_ENTRIES as u64, "{seen}");
    // Only a lower bound is known: the summary says so.
    assert!(
        r.summary()
            .contains(&format!("at least {seen} files in the bundle")),
        "{}",
        r.summary()
    );
    assert!(
        r.summary().contains("inventory incomplete"),
        "{}",
        r.summary()
    );
    assert!(
        r.body().contains(&format!(
            "the walk stopped after {SKILL_SCAN_MAX_ENTRIES} directory entries"
        )),
        "{}",
        &r.text[r.text.len().saturating_sub(500)..]
    );
    assert!(r.text.len() <= runtime::limits::RESULT_TEXT_DEFAULT_CHARS);
}

#[test]
fn a_query_ranks_name_matches_before_description_matches_and_leaves_out_the_rest() {
    let t = Tree::new();
    skill(&t, ".agents/skills/pdf", "pdf", "Fill forms", "P\n");
    skill(
        &t,
        ".agents/skills/release-notes",
        "release-notes",
        "Write release notes and export them as PDF",
        "R\n",
    );
    skill(
        &t,
        ".agents/skills/deploy",
        "deploy",
        "Ship to production",
        "D\n",
    );
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    let r = s.call("list_skills", json!({"query": "PDF"}));
    let out = r.ok();
    assert_eq!(names(out), ["pdf", "release-notes"]);
    let score = |i: usize| out["skills"][i]["score"].as_u64().unwrap();
    assert!(score(0) > score(1));
    assert_eq!(out["total"], 3);
    assert_eq!(out["query"], "PDF");
    assert!(
        r.summary().contains("2 of 3 skills match \"PDF\""),
        "{}",
        r.summary()
    );
    let out = s
        .call("list_skills", json!({"query": "release"}))
        .ok()
        .clone();
    assert_eq!(names(&out), ["release-notes"]);
    let out = s
        .call("list_skills", json!({"query": "kubernetes"}))
        .ok()
        .clone();
    assert_eq!(out["skills"], json!([]));
    // Without a query: by precedence, then name.
    let out = s.call("list_skills", json!({})).ok().clone();
    assert_eq!(names(&out), ["deploy", "pdf", "release-notes"]);
}

#[test]
fn load_skill_returns_the_text_and_the_inventory_and_runs_nothing() {
    let t = Tree::new();
    let text = "---\nname: build\ndescription: How to build\nallowed-tools: Bash\n---\n\
                # Build\nRun scripts/build.sh, then read refs/notes.md.\n";
    t.write(".claude/skills/build/SKILL.md", text);
    let marker = t.path().join("ran");
    t.write(
        ".claude/skills/build/scripts/build.sh",
        format!("#!/bin/sh\ntouch {}\n", marker.display()),
    );
    t.write(".claude/skills/build/refs/notes.md", "notes\n");
    skill(&t, ".agents/skills/other", "other", "Another", "O\n");
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    let r = s.call("load_skill", json!({"name": "build"}));
    let out = r.ok();
    assert_eq!(out["name"], "build");
    assert_eq!(out["description"], "How to build");
    assert_eq!(out["path"], ".claude/skills/build");
    assert_eq!(out["text"], text);
    assert_eq!(out["size_bytes"], text.len());
    assert_eq!(out["truncated"], false);
    assert_eq!(out["inventory_complete"], true);
    let files: Vec<(String, u64)> = out["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_owned(),
                f["bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    let script_len = std::fs::metadata(t.path().join(".claude/skills/build/scripts/build.sh"))
        .unwrap()
        .len();
    assert_eq!(
        files,
        [
            ("SKILL.md".to_owned(), text.len() as u64),
            ("refs/notes.md".to_owned(), 6),
            ("scripts/build.sh".to_owned(), script_len),
        ]
    );
    // The text block: the SKILL.md text, then the files.
    assert!(r.body().starts_with(text), "{}", r.text);
    assert!(r.body().contains("\nscripts/build.sh\t"), "{}", r.text);
    assert!(!marker.exists(), "load_skill ran a script of the bundle");

    let e = s.call("load_skill", json!({"name": "nope"}));
    assert_eq!(e.code(), "not_found");
    assert_eq!(e.error["available"], json!(["other", "build"]));
    assert!(
        e.error["message"]
            .as_str()
            .unwrap()
            .contains("skills: other, build"),
        "{}",
        e.error
    );
}

#[test]
fn a_nearer_root_shadows_a_same_named_skill_of_the_project_root() {
    let t = Tree::new();
    skill(
        &t,
        ".agents/skills/lint",
        "lint",
        "Root lint rules",
        "ROOT\n",
    );
    skill(&t, ".agents/skills/fmt", "fmt", "Formatting", "F\n");
    skill(
        &t,
        "pkg/.claude/skills/lint",
        "lint",
        "Package lint rules",
        "PKG\n",
    );
    t.write("pkg/src/lib.rs", "");
    let mut s = Server::start(t.path(), &["--profile", "agent"]);

    let r = s.call("list_skills", json!({"path": "pkg/src/lib.rs"}));
    let out = r.ok();
    assert_eq!(out["target"], "pkg/src");
    assert_eq!(out["project_root"], ".");
    // The package's root comes first (nearer), so its lint wins.
    assert_eq!(names(out), ["lint", "fmt"]);
    let lint = skill_named(out, "lint");
    assert_eq!(lint["path"], "pkg/.claude/skills/lint");
    assert_eq!(lint["description"], "Package lint rules");
    assert_eq!(
        out["shadowed"],
        json!([{"name": "lint", "path": ".agents/skills/lint", "by": "pkg/.claude/skills/lint"}])
    );
    assert_eq!(
        out["roots"],
        json!(["pkg/.claude/skills", ".agents/skills"])
    );
    assert!(
        r.body()
            .contains("shadowed: lint (.agents/skills/lint) by pkg/.claude/skills/lint"),
        "{}",
        r.text
    );
    let l = s.call("load_skill", json!({"name": "lint", "path": "pkg/src"}));
    assert!(l.ok()["text"].as_str().unwrap().ends_with("PKG\n"));

    // From the project root, the package's skills do not apply.
    let out = s.call("list_skills", json!({})).ok().clone();
    assert_eq!(names(&out), ["fmt", "lint"]);
    assert_eq!(skill_named(&out, "lint")["path"], ".agents/skills/lint");
    assert_eq!(out["shadowed"], json!([]));
    let l = s.call("load_skill", json!({"name": "lint"}));
    assert!(l.ok()["text"].as_str().unwrap().ends_with("ROOT\n"));
}

#[test]
fn a_large_skill_md_is_cut_with_a_note_and_front_matter_past_the_bound_is_a_problem() {
    use runtime::limits::SKILL_FILE_MAX_BYTES;
    let t = Tree::new();
    let body = "Step: do the thing carefully.\n".repeat(2_000);
    skill(&t, ".agents/skills/long", "long", "A long manual", &body);
    t.write(
        ".agents/skills/endless/SKILL.md",
        format!(
            "---\nname: endless\ndescription: x\n{}",
            "k: v\n".repeat(10_000)
        ),
    );
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    let out = s.call("list_skills", json!({})).ok().clone();
    assert_eq!(names(&out), ["long"]);
    let reason = problem_at(&out, ".agents/skills/endless/SKILL.md")["reason"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        reason.contains(&format!("within the first {SKILL_FILE_MAX_BYTES} bytes")),
        "{reason}"
    );

    let r = s.call("load_skill", json!({"name": "long"}));
    let loaded = r.ok();
    let text = loaded["text"].as_str().unwrap();
    assert_eq!(loaded["truncated"], true);
    assert!(text.len() <= SKILL_FILE_MAX_BYTES && text.len() > SKILL_FILE_MAX_BYTES - 100);
    assert!(
        loaded["size_bytes"].as_u64().unwrap() > SKILL_FILE_MAX_BYTES as u64,
        "{}",
        loaded["size_bytes"]
    );
    assert!(
        r.summary()
            .contains(&format!("cut at {SKILL_FILE_MAX_BYTES} bytes")),
        "{}",
        r.summary()
    );
    assert!(
        r.body().contains("[SKILL.md continues"),
        "{}",
        &r.text[r.text.len() - 600..]
    );
}

#[test]
fn a_name_that_is_not_a_skill_name_or_not_its_directorys_is_a_problem_never_offered() {
    let t = Tree::new();
    skill(&t, ".agents/skills/good-one", "good-one", "Fine", "G\n");
    skill(
        &t,
        ".agents/skills/passwd",
        "\"../../etc/passwd\"",
        "Sneaky",
        "P\n",
    );
    skill(
        &t,
        ".agents/skills/spaced",
        "\"has space\"",
        "Spaced",
        "S\n",
    );
    skill(&t, ".agents/skills/Upper", "Upper", "Capitals", "U\n");
    skill(&t, ".agents/skills/a--b", "a--b", "Doubled hyphen", "D\n");
    skill(
        &t,
        ".claude/skills/mismatch",
        "other-name",
        "Elsewhere",
        "M\n",
    );
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    let r = s.call("list_skills", json!({}));
    let out = r.ok();
    assert_eq!(names(out), ["good-one"]);
    let reason = |path: &str| {
        let p = problem_at(out, path);
        assert_eq!(p["kind"], "front_matter", "{p}");
        p["reason"].as_str().unwrap().to_owned()
    };
    for dir in ["passwd", "spaced", "Upper", "a--b"] {
        let why = reason(&format!(".agents/skills/{dir}/SKILL.md"));
        assert!(
            why.contains("lowercase letters, digits and hyphens"),
            "{dir}: {why}"
        );
    }
    let why = reason(".claude/skills/mismatch/SKILL.md");
    assert!(
        why.contains("other-name") && why.contains("must match its directory"),
        "{why}"
    );
    assert!(!r.summary().contains("passwd"), "{}", r.summary());
    assert!(
        r.summary().contains("load_skill {\"name\": \"good-one\"}"),
        "{}",
        r.summary()
    );
    for name in ["../../etc/passwd", "other-name", "Upper"] {
        let e = s.call("load_skill", json!({"name": name}));
        assert_eq!(e.code(), "not_found", "{name}");
    }
}

#[test]
fn one_bundle_reached_through_two_links_is_listed_once_and_shadows_nothing() {
    let t = Tree::new();
    // The tester's fx13: `.agents/skills` links to the shared skills, and
    // `.claude/skills/inner-skill` links to one of them again.
    skill(
        &t,
        "shared/skillsrc/inner-skill",
        "inner-skill",
        "Shared",
        "I\n",
    );
    std::fs::create_dir_all(t.path().join(".agents")).unwrap();
    std::os::unix::fs::symlink("../shared/skillsrc", t.path().join(".agents/skills")).unwrap();
    std::fs::create_dir_all(t.path().join(".claude/skills")).unwrap();
    std::os::unix::fs::symlink(
        "../../shared/skillsrc/inner-skill",
        t.path().join(".claude/skills/inner-skill"),
    )
    .unwrap();
    let mut s = Server::start(t.path(), &["--profile", "agent"]);
    let r = s.call("list_skills", json!({}));
    let out = r.ok();
    assert_eq!(names(out), ["inner-skill"]);
    assert_eq!(
        skill_named(out, "inner-skill")["path"],
        ".agents/skills/inner-skill"
    );
    assert_eq!(out["shadowed"], json!([]), "{out}");
    assert_eq!(out["problems"], json!([]), "{out}");
    assert!(!r.text.contains("shadowed"), "{}", r.text);
}
