//! Ordering skills by a query.

use super::Skill;

/// The skills matching `query`, best first: each as (index in `skills`, score). A query term
/// (the query lowercased, split at every character that is not a letter or digit) scores 8 as
/// a whole word of the name, 4 inside it, 2 as a whole word of the description, 1 inside it;
/// each term found adds 5 more (more terms found rank higher), and a name equal to the whole
/// query adds 100. Skills no term matches are left out; ties keep the order of `skills`.
/// `None` when the query has no term.
pub(crate) fn rank(skills: &[Skill], query: &str) -> Option<Vec<(usize, u32)>> {
    let whole = query.trim().to_lowercase();
    let mut terms: Vec<&str> = whole
        .split(|c: char| !c.is_alphanumeric())
        .filter(|t| !t.is_empty())
        .collect();
    terms.sort_unstable();
    terms.dedup();
    if terms.is_empty() {
        return None;
    }
    let words = |s: &str| -> Vec<String> {
        s.split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_owned)
            .collect()
    };
    let mut ranked: Vec<(usize, u32)> = skills
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            let name = s.name.to_lowercase();
            let description = s.description.to_lowercase();
            let (name_words, description_words) = (words(&name), words(&description));
            let mut score = 0;
            for t in &terms {
                let mut found = true;
                if name_words.iter().any(|w| w == t) {
                    score += 8;
                } else if name.contains(t) {
                    score += 4;
                } else {
                    found = false;
                }
                if description_words.iter().any(|w| w == t) {
                    score += 2;
                    found = true;
                } else if description.contains(t) {
                    score += 1;
                    found = true;
                }
                if found {
                    score += 5;
                }
            }
            if name == whole {
                score += 100;
            }
            (score > 0).then_some((i, score))
        })
        .collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    Some(ranked)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::tools::skills::engine::Scope;

    #[test]
    fn ranking_prefers_name_matches_and_leaves_out_non_matches() {
        let skill = |name: &str, description: &str| Skill {
            name: name.into(),
            description: description.into(),
            path: name.into(),
            root: ".agents/skills".into(),
            scope: Scope::Project,
            precedence: 0,
            dir: PathBuf::new(),
            entry: PathBuf::new(),
        };
        let skills = [
            skill("release", "Cut a release and update the PDF changelog"),
            skill("pdf", "Fill PDF forms"),
            skill("pdf-merge", "Merge documents"),
            skill("deploy", "Ship to production"),
        ];
        let order: Vec<usize> = rank(&skills, "PDF")
            .unwrap()
            .into_iter()
            .map(|r| r.0)
            .collect();
        assert_eq!(order, vec![1, 2, 0]);
        let order: Vec<usize> = rank(&skills, "merge pdf")
            .unwrap()
            .into_iter()
            .map(|r| r.0)
            .collect();
        assert_eq!(order[0], 2, "both terms in the name rank first");
        assert!(rank(&skills, " - ").is_none());
        assert!(rank(&skills, "kubernetes").unwrap().is_empty());
    }
}
