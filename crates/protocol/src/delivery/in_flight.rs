//! The in-flight table of one hop: requests it passed on and whose answer has not come back, by
//! JSON-RPC id, each with what the hop keeps for it (`V`: a reply sink, a worker generation, the
//! method...), and the progress tokens those requests carry.
//!
//! Rules:
//! - A request id is in flight at most once: [`InFlight::begin`] refuses an id that is (JSON-RPC
//!   2.0 §4 and MCP Basic › Messages › Requests: the id is unique among a sender's requests in
//!   flight; the caller answers the duplicate with an error and passes nothing on).
//! - Ids are compared as [`IdKey`]s: the string `"1"` and the number `1` are different requests.
//! - A progress token names one in-flight request (MCP Basic › Utilities › Progress: tokens are
//!   unique across active requests). A token a newer request carries moves to it; ending a request
//!   forgets its token only while the token still names it.
//! - Every entry leaves exactly once: by [`InFlight::end`] (its answer, or its cancellation), by
//!   [`InFlight::end_where`] (the peer that had it is gone) or by [`InFlight::drain`]. What leaves
//!   is returned, so the caller can answer each request that lost its peer.
//!
//! No I/O, no clock, no lock: each hop holds its table inside its own state.

use std::collections::HashMap;

use crate::jsonrpc::IdKey;

/// Requests in flight by id, with a `V` each, and their progress tokens.
#[derive(Debug)]
pub struct InFlight<V> {
    requests: HashMap<IdKey, V>,
    /// Progress token → the request that carries it.
    progress: HashMap<IdKey, IdKey>,
    /// Request → its progress token.
    tokens: HashMap<IdKey, IdKey>,
}

/// [`InFlight::begin`] refused a request: one with the same id is in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AlreadyInFlight;

impl std::fmt::Display for AlreadyInFlight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a request with this id is still in flight")
    }
}

impl std::error::Error for AlreadyInFlight {}

impl<V> Default for InFlight<V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<V> InFlight<V> {
    /// An empty table.
    pub fn new() -> Self {
        Self {
            requests: HashMap::new(),
            progress: HashMap::new(),
            tokens: HashMap::new(),
        }
    }

    /// Records request `id` with `value`, and the progress token it carries, if any.
    ///
    /// # Errors
    /// [`AlreadyInFlight`] when `id` is in flight; the table is unchanged.
    pub fn begin(
        &mut self,
        id: IdKey,
        progress_token: Option<IdKey>,
        value: V,
    ) -> Result<(), AlreadyInFlight> {
        if self.requests.contains_key(&id) {
            return Err(AlreadyInFlight);
        }
        if let Some(t) = progress_token {
            if let Some(previous) = self.progress.insert(t.clone(), id.clone()) {
                self.tokens.remove(&previous);
            }
            self.tokens.insert(id.clone(), t);
        }
        self.requests.insert(id, value);
        Ok(())
    }

    /// Request `id` left (answered or cancelled): its value, `None` when it was not in flight.
    pub fn end(&mut self, id: &IdKey) -> Option<V> {
        let value = self.requests.remove(id)?;
        if let Some(t) = self.tokens.remove(id) {
            self.progress.remove(&t);
        }
        Some(value)
    }

    /// Ends every request whose entry `pred` selects, and returns them (in no order).
    pub fn end_where(&mut self, mut pred: impl FnMut(&IdKey, &V) -> bool) -> Vec<(IdKey, V)> {
        let keys: Vec<IdKey> = self
            .requests
            .iter()
            .filter(|(k, v)| pred(k, v))
            .map(|(k, _)| k.clone())
            .collect();
        keys.into_iter()
            .filter_map(|k| self.end(&k).map(|v| (k, v)))
            .collect()
    }

    /// Ends every request and returns them (in no order).
    pub fn drain(&mut self) -> Vec<(IdKey, V)> {
        self.progress.clear();
        self.tokens.clear();
        self.requests.drain().collect()
    }

    /// Whether request `id` is in flight.
    pub fn contains(&self, id: &IdKey) -> bool {
        self.requests.contains_key(id)
    }

    /// The value of request `id`, when it is in flight.
    pub fn get(&self, id: &IdKey) -> Option<&V> {
        self.requests.get(id)
    }

    /// The value of request `id`, mutably, when it is in flight.
    pub fn get_mut(&mut self, id: &IdKey) -> Option<&mut V> {
        self.requests.get_mut(id)
    }

    /// The in-flight request that progress token `token` names, with its value.
    pub fn by_progress(&self, token: &IdKey) -> Option<(&IdKey, &V)> {
        let id = self.progress.get(token)?;
        self.requests.get_key_value(id)
    }

    /// The requests in flight with their values (in no order).
    pub fn iter(&self) -> impl Iterator<Item = (&IdKey, &V)> {
        self.requests.iter()
    }

    /// The values of the requests in flight (in no order).
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.requests.values()
    }

    /// The values of the requests in flight, mutably (in no order).
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.requests.values_mut()
    }

    /// How many requests are in flight.
    pub fn len(&self) -> usize {
        self.requests.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.requests.is_empty()
    }
}

#[cfg(test)]
mod tests;
