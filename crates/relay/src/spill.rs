//! Receiving an MCP request body: held in memory while small, spilled to an anonymous file once
//! it passes [`REQUEST_BODY_SPILL_THRESHOLD`], so that a slow or held body costs the relay at
//! most that much memory while it arrives.
//!
//! Rules:
//! - A body of at most the threshold stays in memory and is handed over as one [`Bytes`]: no
//!   file, and no copy beyond the one collecting its chunks takes (none for a body of one
//!   chunk), as `axum::body::to_bytes` does.
//! - Each time the bytes held pass the threshold, they are written to the body's file, created
//!   on the first time with `tempfile::tempfile_in` in the spill directory, itself created
//!   owner-only (0700) when missing. The file is unlinked before a byte is written to it (on
//!   Linux file systems that have `O_TMPFILE` it never has a name), so no other process can
//!   open it by name, and its bytes are freed when the body is dropped, however the relay
//!   ends. The rest is written when the body ends, and the file is handed over rewound. File
//!   I/O runs on tokio's blocking pool; a body being written is not read further meanwhile.
//! - The bounds are [`crate::server::read_body`]'s, checked as the chunks arrive: more than
//!   `limit` bytes → [`BodyError::TooLarge`], not complete within [`REQUEST_BODY_READ_TIMEOUT`]
//!   (writing included) → [`BodyError::Timeout`], a failed connection → [`BodyError::Broken`].
//! - A file that cannot be created or written (disk full, a directory the relay cannot write)
//!   is [`ReceiveError::Spill`], never a panic; the caller answers 503 with `Retry-After`.
//! - Without a spill directory ([`crate::RelayConfig::spill_dir`] `None`) bodies are held in
//!   memory whole, as `read_body` holds them.
//! - The body budget ([`crate::budget`]) counts a body's first threshold bytes in memory and
//!   the rest on disk, so it bounds the disk a holder and the relay can fill with bodies, as it
//!   bounds memory.
//! - Counted in [`Metrics`]: bodies spilled, and the body bytes receivers hold in memory (a
//!   gauge: each receiver adds what it holds and takes it back when written, handed over or
//!   dropped).

use std::{
    fs::File,
    io::{Read, Seek, Write},
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicI64, Ordering},
    },
};

use axum::body::{Body, Bytes};
use http_body_util::BodyExt;

use crate::{
    limits::{REQUEST_BODY_READ_TIMEOUT, REQUEST_BODY_SPILL_THRESHOLD},
    metrics::Metrics,
    server::BodyError,
};

/// Why a body was not received.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReceiveError {
    /// Too large, too slow, or broken off ([`BodyError`]).
    #[error("{0}")]
    Body(BodyError),
    /// Its file could not be created, written or read back (the I/O error says why).
    #[error("the request body could not be held on disk: {0}")]
    Spill(std::io::Error),
}

/// A body received whole.
#[derive(Debug)]
pub(crate) enum Received {
    /// At most the threshold (or any size without a spill directory), in memory.
    Memory(Bytes),
    /// Larger: in an anonymous file.
    Spilled(SpilledBody),
}

impl From<Bytes> for Received {
    fn from(b: Bytes) -> Self {
        Self::Memory(b)
    }
}

/// A body in an anonymous file, rewound to its start.
#[derive(Debug)]
pub(crate) struct SpilledBody {
    file: File,
    len: usize,
}

impl SpilledBody {
    /// Reads the body back into memory (blocking: call it on the blocking pool). Reading it
    /// back whole and parsing the slice beats `serde_json::from_reader` over a `BufReader`:
    /// 1.2–7 times faster on 8 MiB bodies (7 on a file's text in one string), for the body's
    /// size of memory during the parse, which `body::message` bounds by parsing a few at once.
    ///
    /// # Errors
    /// The file cannot be read, or holds fewer bytes than were written to it.
    pub(crate) fn read_back(mut self) -> std::io::Result<Vec<u8>> {
        let mut bytes = Vec::with_capacity(self.len);
        self.file.read_to_end(&mut bytes)?;
        if bytes.len() != self.len {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("{} of {} bytes read back", bytes.len(), self.len),
            ));
        }
        Ok(bytes)
    }
}

#[cfg(test)]
impl SpilledBody {
    /// A spilled body of `len` bytes in `file` (tests: a file that lost bytes).
    pub(crate) fn of(file: File, len: usize) -> Self {
        Self { file, len }
    }
}

/// Where the MCP endpoints put the bodies they receive: the spill directory, the threshold and
/// the metrics they count in (module docs).
#[derive(Debug)]
pub(crate) struct Spill {
    dir: Option<PathBuf>,
    threshold: usize,
    metrics: Arc<Metrics>,
}

impl Spill {
    /// Receivers that spill into `dir` (none: never) past [`REQUEST_BODY_SPILL_THRESHOLD`],
    /// counting in `metrics`.
    pub(crate) fn new(dir: Option<PathBuf>, metrics: Arc<Metrics>) -> Self {
        Self {
            dir,
            threshold: REQUEST_BODY_SPILL_THRESHOLD,
            metrics,
        }
    }

    /// The same with another threshold (tests, to spill small bodies).
    #[cfg(test)]
    pub(crate) fn with_threshold(mut self, threshold: usize) -> Self {
        self.threshold = threshold;
        self
    }

    /// Receives `body`, of at most `limit` bytes, within [`REQUEST_BODY_READ_TIMEOUT`] (module
    /// docs).
    ///
    /// # Errors
    /// [`ReceiveError::Body`] past the size or the time, or when the body breaks off;
    /// [`ReceiveError::Spill`] when its file cannot be created or written.
    pub(crate) async fn receive(&self, body: Body, limit: usize) -> Result<Received, ReceiveError> {
        let received = tokio::time::timeout(REQUEST_BODY_READ_TIMEOUT, self.collect(body, limit))
            .await
            .unwrap_or(Err(ReceiveError::Body(BodyError::Timeout)));
        if let (Err(ReceiveError::Spill(e)), Some(dir)) = (&received, &self.dir) {
            tracing::warn!(
                dir = %dir.display(),
                error = %e,
                "an MCP request body could not be spilled to disk; answered 503"
            );
        }
        received
    }

    async fn collect(&self, mut body: Body, limit: usize) -> Result<Received, ReceiveError> {
        let mut held = Held::new(&self.metrics.body_bytes_in_memory);
        let mut file: Option<File> = None;
        let mut written = 0usize;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| ReceiveError::Body(BodyError::of(&e, limit)))?;
            let Ok(data) = frame.into_data() else {
                continue; // trailers
            };
            if written + held.len + data.len() > limit {
                return Err(ReceiveError::Body(BodyError::TooLarge(limit)));
            }
            held.push(data);
            if held.len > self.threshold
                && let Some(dir) = &self.dir
            {
                let f = match file.take() {
                    Some(f) => f,
                    None => self.create(dir).await?,
                };
                written += held.len;
                file = Some(held.write_to(f).await?);
            }
        }
        match file {
            None => Ok(Received::Memory(held.into_bytes())),
            Some(f) => {
                let len = written + held.len;
                let file = held.finish(f).await?;
                Ok(Received::Spilled(SpilledBody { file, len }))
            }
        }
    }

    /// A new anonymous file in `dir`, the directory created owner-only when missing.
    async fn create(&self, dir: &Path) -> Result<File, ReceiveError> {
        let dir = dir.to_owned();
        let file = blocking(move || {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&dir)?;
            tempfile::tempfile_in(&dir)
        })
        .await?;
        self.metrics.bodies_spilled.fetch_add(1, Ordering::Relaxed);
        Ok(file)
    }
}

/// Runs blocking file I/O on the blocking pool.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> Result<T, ReceiveError> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r.map_err(ReceiveError::Spill),
        // The closures do not panic; a join error is the runtime shutting down.
        Err(e) => Err(ReceiveError::Spill(std::io::Error::other(e))),
    }
}

/// The chunks a receiver holds in memory, counted in a gauge while held.
struct Held<'a> {
    chunks: Vec<Bytes>,
    len: usize,
    gauge: &'a AtomicI64,
}

impl<'a> Held<'a> {
    fn new(gauge: &'a AtomicI64) -> Self {
        Self {
            chunks: Vec::new(),
            len: 0,
            gauge,
        }
    }

    fn push(&mut self, data: Bytes) {
        Metrics::add(self.gauge, data.len() as i64);
        self.len += data.len();
        self.chunks.push(data);
    }

    /// Gives back what the gauge counts of the chunks, once they are written or handed over.
    fn release(&mut self) {
        Metrics::add(self.gauge, -(self.len as i64));
        self.len = 0;
    }

    /// Writes the chunks held to `file` and returns it; they count as held until written.
    async fn write_to(&mut self, mut file: File) -> Result<File, ReceiveError> {
        let chunks = std::mem::take(&mut self.chunks);
        let file = blocking(move || {
            for c in &chunks {
                file.write_all(c)?;
            }
            Ok(file)
        })
        .await?;
        self.release();
        Ok(file)
    }

    /// Writes the rest to `file` and rewinds it.
    async fn finish(mut self, file: File) -> Result<File, ReceiveError> {
        let mut file = self.write_to(file).await?;
        blocking(move || {
            file.rewind()?;
            Ok(file)
        })
        .await
    }

    /// The chunks as one [`Bytes`]: a single chunk as it is, several copied once.
    fn into_bytes(mut self) -> Bytes {
        let chunks = std::mem::take(&mut self.chunks);
        let len = self.len;
        self.release();
        match <[Bytes; 1]>::try_from(chunks) {
            Ok([one]) => one,
            Err(chunks) => {
                let mut all = Vec::with_capacity(len);
                for c in &chunks {
                    all.extend_from_slice(c);
                }
                Bytes::from(all)
            }
        }
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use futures_util::{StreamExt, stream};
    use tokio::sync::mpsc;

    use super::*;
    use crate::limits::MCP_REQUEST_BODY_MAX_BYTES;

    /// A body that sends `bytes` in chunks of at most `chunk` bytes and ends.
    fn chunked(bytes: &[u8], chunk: usize) -> Body {
        let chunks: Vec<Result<Bytes, std::io::Error>> = bytes
            .chunks(chunk)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        Body::from_stream(stream::iter(chunks))
    }

    /// A body that sends `len` bytes in 64 KiB chunks, then tells `sent` and never ends (a
    /// client holding its last byte). The signal comes once the receiver asks for the frame
    /// after the last chunk, so every chunk before it has been handled.
    fn held(len: usize, sent: mpsc::UnboundedSender<()>) -> Body {
        let chunk = Bytes::from(vec![b' '; 64 * 1024]);
        let chunks = (0..len)
            .step_by(chunk.len())
            .map(move |at| Ok::<_, std::io::Error>(chunk.slice(..chunk.len().min(len - at))));
        let tail = stream::once(async move {
            let _ = sent.send(());
            std::future::pending::<Result<Bytes, std::io::Error>>().await
        });
        Body::from_stream(stream::iter(chunks).chain(tail))
    }

    fn spill(dir: Option<PathBuf>) -> (Spill, Arc<Metrics>) {
        let metrics = Arc::<Metrics>::default();
        (Spill::new(dir, metrics.clone()), metrics)
    }

    fn spilled(m: &Metrics) -> u64 {
        m.bodies_spilled.load(Ordering::Relaxed)
    }

    fn in_memory(m: &Metrics) -> i64 {
        m.body_bytes_in_memory.load(Ordering::Relaxed)
    }

    /// A body of the threshold stays in memory and the spill directory is not even created; one
    /// byte more is written to an anonymous file in a directory created owner-only (no name is
    /// left in it), read back whole, and counted.
    #[tokio::test]
    async fn a_body_past_the_threshold_is_spilled_to_an_anonymous_file_and_one_at_it_is_not() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("spill");
        let (s, m) = spill(Some(dir.clone()));
        let at: Vec<u8> = (0..REQUEST_BODY_SPILL_THRESHOLD).map(|i| i as u8).collect();
        let got = s
            .receive(chunked(&at, 16 * 1024), MCP_REQUEST_BODY_MAX_BYTES)
            .await
            .unwrap();
        let Received::Memory(b) = got else {
            panic!("a body of the threshold was spilled")
        };
        assert_eq!(b, at);
        assert!(!dir.exists(), "nothing was written to disk");
        assert_eq!((spilled(&m), in_memory(&m)), (0, 0));

        let over: Vec<u8> = (0..=REQUEST_BODY_SPILL_THRESHOLD * 3)
            .map(|i| (i % 251) as u8)
            .collect();
        let got = s
            .receive(chunked(&over, 16 * 1024), MCP_REQUEST_BODY_MAX_BYTES)
            .await
            .unwrap();
        let Received::Spilled(file) = got else {
            panic!("a body past the threshold stayed in memory")
        };
        assert_eq!(spilled(&m), 1);
        assert_eq!(in_memory(&m), 0, "what was held is given back");
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700, "{mode:o}");
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            0,
            "the file has no name"
        );
        assert_eq!(file.read_back().unwrap(), over);
    }

    /// Received in memory, a body gets what `server::read_body` (the reader of the OAuth
    /// endpoints, and of the MCP endpoints before spilling) gives: the same bytes, or the same
    /// error, past the limit or broken off.
    #[tokio::test]
    async fn in_memory_a_body_is_received_as_read_body_reads_it() {
        let (s, _) = spill(None);
        let limit = 100_000;
        let broken = || {
            Body::from_stream(stream::iter(vec![
                Ok(Bytes::from(vec![b'x'; 8192])),
                Err(std::io::Error::other("connection reset")),
            ]))
        };
        let ok = vec![b'y'; limit];
        let over = vec![b'z'; limit + 1];
        type Make<'a> = Box<dyn Fn() -> Body + 'a>;
        let cases: [(&str, Make<'_>); 3] = [
            ("complete", Box::new(|| chunked(&ok, 4096))),
            ("too large", Box::new(|| chunked(&over, 4096))),
            ("broken", Box::new(broken)),
        ];
        for (case, body) in cases {
            let read = crate::server::read_body(body(), limit).await;
            let received = match s.receive(body(), limit).await {
                Ok(Received::Memory(b)) => Ok(b),
                Ok(Received::Spilled(_)) => panic!("{case}: spilled without a directory"),
                Err(ReceiveError::Body(e)) => Err(e),
                Err(e) => panic!("{case}: {e}"),
            };
            assert_eq!(received, read, "{case}");
        }
    }

    /// A body of one chunk is handed over as that chunk, without a copy.
    #[tokio::test]
    async fn a_body_of_one_chunk_is_not_copied() {
        let (s, _) = spill(None);
        let one = Bytes::from(vec![7u8; 1000]);
        let body = Body::from(one.clone());
        let Received::Memory(got) = s.receive(body, 4096).await.unwrap() else {
            panic!("spilled without a directory")
        };
        assert_eq!(got.as_ptr(), one.as_ptr());
    }

    /// The bounds hold for a spilled body as for one in memory: past the limit it is too large
    /// (and the limit itself is accepted), a broken connection is broken, and one that stops
    /// coming times out (paused clock).
    #[tokio::test]
    async fn size_time_and_broken_bodies_are_refused_when_spilled_too() {
        let root = tempfile::tempdir().unwrap();
        let (s, m) = spill(Some(root.path().join("spill")));
        let s = s.with_threshold(1024);
        let limit = 64 * 1024;
        let body = vec![b'x'; limit + 1];
        let e = s.receive(chunked(&body, 4096), limit).await.unwrap_err();
        assert!(
            matches!(e, ReceiveError::Body(BodyError::TooLarge(n)) if n == limit),
            "{e:?}"
        );
        let Received::Spilled(_) = s
            .receive(chunked(&body[..limit], 4096), limit)
            .await
            .unwrap()
        else {
            panic!("not spilled")
        };

        let broken = stream::iter(vec![
            Ok(Bytes::from(vec![b'x'; 8192])),
            Err(std::io::Error::other("connection reset")),
        ]);
        let e = s
            .receive(Body::from_stream(broken), limit)
            .await
            .unwrap_err();
        assert!(
            matches!(&e, ReceiveError::Body(BodyError::Broken(why)) if why.contains("connection reset")),
            "{e:?}"
        );

        tokio::time::pause();
        let (sent, mut sent_rx) = mpsc::unbounded_channel();
        let started = tokio::time::Instant::now();
        let e = s.receive(held(8192, sent), limit).await.unwrap_err();
        assert!(matches!(e, ReceiveError::Body(BodyError::Timeout)), "{e:?}");
        assert!(
            sent_rx.try_recv().is_ok(),
            "the body was sent before it stalled"
        );
        let waited = started.elapsed();
        assert!(
            waited >= REQUEST_BODY_READ_TIMEOUT
                && waited < REQUEST_BODY_READ_TIMEOUT + std::time::Duration::from_secs(1),
            "{waited:?}"
        );
        assert_eq!(in_memory(&m), 0, "a refused body gives back what it held");
    }

    /// A spill directory that cannot be made (its parent is a file) is a spill error, not a
    /// panic, and the body's bytes are given back.
    #[tokio::test]
    async fn a_spill_directory_that_cannot_be_made_is_a_spill_error() {
        let root = tempfile::tempdir().unwrap();
        let file = root.path().join("a-file");
        std::fs::write(&file, b"").unwrap();
        let (s, m) = spill(Some(file.join("spill")));
        let body = vec![b' '; REQUEST_BODY_SPILL_THRESHOLD + 1];
        let e = s
            .receive(chunked(&body, 64 * 1024), MCP_REQUEST_BODY_MAX_BYTES)
            .await
            .unwrap_err();
        assert!(matches!(e, ReceiveError::Spill(_)), "{e:?}");
        assert_eq!((spilled(&m), in_memory(&m)), (0, 0));
    }

    /// Bodies of 8 MiB − 1 held open (their last byte never sent) cost at most the threshold of
    /// memory each once spilled; held in memory, the same gauge shows the whole body. Dropping
    /// the receivers (the clients went away) gives everything back.
    #[tokio::test]
    async fn held_large_bodies_keep_at_most_the_threshold_each_in_memory() {
        const HELD: usize = 4;
        let len = MCP_REQUEST_BODY_MAX_BYTES - 1;
        let root = tempfile::tempdir().unwrap();
        let (s, m) = spill(Some(root.path().join("spill")));
        let s = Arc::new(s);
        let (sent, mut all_sent) = mpsc::unbounded_channel();
        let receivers: Vec<_> = (0..HELD)
            .map(|_| {
                let (s, body) = (s.clone(), held(len, sent.clone()));
                tokio::spawn(async move { s.receive(body, MCP_REQUEST_BODY_MAX_BYTES).await })
            })
            .collect();
        for _ in 0..HELD {
            all_sent.recv().await.unwrap();
        }
        let held_bytes = in_memory(&m);
        assert!(
            (0..=(REQUEST_BODY_SPILL_THRESHOLD * HELD) as i64).contains(&held_bytes),
            "{held_bytes} bytes held in memory for {HELD} bodies"
        );
        assert_eq!(spilled(&m), HELD as u64);
        for r in receivers {
            r.abort();
            assert!(r.await.unwrap_err().is_cancelled());
        }
        assert_eq!(in_memory(&m), 0);

        let (s, m) = spill(None);
        let s = Arc::new(s);
        let (sent, mut all_sent) = mpsc::unbounded_channel();
        let receiver = tokio::spawn({
            let s = s.clone();
            async move { s.receive(held(len, sent), MCP_REQUEST_BODY_MAX_BYTES).await }
        });
        all_sent.recv().await.unwrap();
        assert_eq!(in_memory(&m), len as i64, "without a spill directory");
        receiver.abort();
        let _ = receiver.await;
        assert_eq!(in_memory(&m), 0);
    }
}
