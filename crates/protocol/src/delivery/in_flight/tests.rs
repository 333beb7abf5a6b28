//! Unit and property tests of the in-flight table. The property test (bolero) runs arbitrary
//! sequences of begin / end / end-where / drain over a few ids and tokens against a plain model
//! and checks: an id is in flight at most once, every entry leaves exactly once, and a progress
//! token names exactly the newest in-flight request that carried it.

use std::collections::{HashMap, HashSet};

use serde_json::json;

use super::*;

fn key(n: u8) -> IdKey {
    IdKey::of(&json!(n))
}

#[test]
fn a_duplicate_id_is_refused_and_changes_nothing() {
    let mut t = InFlight::new();
    assert_eq!(t.begin(key(1), Some(key(7)), "a"), Ok(()));
    assert_eq!(t.begin(key(1), None, "b"), Err(AlreadyInFlight));
    assert_eq!(t.get(&key(1)), Some(&"a"));
    assert_eq!(t.by_progress(&key(7)), Some((&key(1), &"a")));
    assert_eq!(t.end(&key(1)), Some("a"));
    assert_eq!(t.end(&key(1)), None, "an entry leaves once");
    assert!(t.by_progress(&key(7)).is_none());
    assert_eq!(
        t.begin(key(1), None, "c"),
        Ok(()),
        "an answered id may come again"
    );
}

#[test]
fn string_and_number_ids_are_different_requests() {
    let mut t = InFlight::new();
    t.begin(IdKey::of(&json!(1)), None, ()).unwrap();
    assert_eq!(t.begin(IdKey::of(&json!("1")), None, ()), Ok(()));
    assert_eq!(t.len(), 2);
}

#[test]
fn a_token_moves_to_the_newer_request_and_the_older_ending_keeps_it() {
    let mut t = InFlight::new();
    t.begin(key(1), Some(key(9)), 1).unwrap();
    t.begin(key(2), Some(key(9)), 2).unwrap();
    assert_eq!(t.by_progress(&key(9)), Some((&key(2), &2)));
    t.end(&key(1));
    assert_eq!(t.by_progress(&key(9)), Some((&key(2), &2)));
    t.end(&key(2));
    assert!(t.by_progress(&key(9)).is_none());
}

#[test]
fn end_where_and_drain_return_what_left() {
    let mut t = InFlight::new();
    for n in 1..=4 {
        t.begin(key(n), Some(key(10 + n)), n).unwrap();
    }
    let mut even: Vec<u8> = t
        .end_where(|_, v| v % 2 == 0)
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    even.sort_unstable();
    assert_eq!(even, [2, 4]);
    assert!(t.by_progress(&key(12)).is_none());
    assert_eq!(t.by_progress(&key(11)), Some((&key(1), &1)));
    assert_eq!(t.drain().len(), 2);
    assert!(t.is_empty());
    assert!(t.by_progress(&key(11)).is_none());
}

const CASES: usize = 2_000;

#[test]
fn every_entry_leaves_once_and_tokens_name_the_newest_holder() {
    bolero::check!()
        .with_type::<Vec<(u8, u8, u8)>>()
        .with_iterations(CASES)
        .for_each(|ops| {
            let mut t = InFlight::new();
            // The model: id → (value, token), token → id.
            let mut live: HashMap<u8, (u32, Option<u8>)> = HashMap::new();
            let mut tokens: HashMap<u8, u8> = HashMap::new();
            let mut left: HashSet<u32> = HashSet::new();
            let mut next = 0u32;
            for &(op, a, b) in ops {
                let (id, tok) = (a % 6, b % 4);
                match op % 5 {
                    0 | 1 => {
                        next += 1;
                        let token = (b % 5 != 4).then_some(tok);
                        let got = t.begin(key(id), token.map(key), next);
                        match live.entry(id) {
                            std::collections::hash_map::Entry::Occupied(_) => {
                                assert_eq!(got, Err(AlreadyInFlight));
                            }
                            std::collections::hash_map::Entry::Vacant(v) => {
                                assert_eq!(got, Ok(()));
                                v.insert((next, token));
                                if let Some(tk) = token {
                                    tokens.insert(tk, id);
                                }
                            }
                        }
                    }
                    2 => {
                        let got = t.end(&key(id));
                        let want = live.remove(&id);
                        assert_eq!(got, want.map(|(v, _)| v));
                        if let Some((v, tk)) = want {
                            assert!(left.insert(v), "{v} left twice");
                            if let Some(tk) = tk.filter(|tk| tokens.get(tk) == Some(&id)) {
                                tokens.remove(&tk);
                            }
                        }
                    }
                    3 => {
                        let out = t.end_where(|_, v| v % 2 == u32::from(b % 2));
                        for (_, v) in out {
                            assert!(left.insert(v), "{v} left twice");
                            let id = *live
                                .iter()
                                .find(|(_, (lv, _))| *lv == v)
                                .map(|(k, _)| k)
                                .expect("what left was in flight");
                            live.remove(&id);
                            tokens.retain(|_, holder| *holder != id);
                        }
                        assert!(live.values().all(|(v, _)| v % 2 != u32::from(b % 2)));
                    }
                    _ => {
                        if b % 8 == 0 {
                            for (_, v) in t.drain() {
                                assert!(left.insert(v), "{v} left twice");
                            }
                            live.clear();
                            tokens.clear();
                        }
                    }
                }
                assert_eq!(t.len(), live.len());
                for tk in 0..4u8 {
                    let want = tokens.get(&tk).map(|id| (key(*id), live[id].0));
                    let got = t.by_progress(&key(tk)).map(|(k, v)| (k.clone(), *v));
                    assert_eq!(got, want, "token {tk}");
                }
            }
        });
}
