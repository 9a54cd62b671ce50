//! Single flight: concurrent requests for the same key share one piece of work.
//!
//! The work runs in its own task, detached from every caller, so a client that hangs up does not
//! cancel a fetch others are waiting for. All waiters get the same result; errors are not
//! remembered, so the next call after a failure starts a fresh flight. The error type is the
//! caller's: it needs only to be shareable and to say when a flight's task died ([`Aborted`]).

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use futures_util::future::{BoxFuture, FutureExt, Shared};

/// One piece of work in progress: awaiting it (any number of times, by any number of callers)
/// gives its result.
pub type Flight<T, E> = Shared<BoxFuture<'static, Result<T, E>>>;

/// A flight's task ended without a result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Aborted {
    /// The work panicked; the panic's message, when it was text.
    #[error("background fetch failed: it panicked{}", .message.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    Panicked { message: Option<Arc<str>> },
    /// The work was cancelled: the runtime is shutting down.
    #[error("background fetch failed: it was cancelled")]
    Cancelled,
}

impl Aborted {
    /// Why a task ended without a result.
    pub fn of(e: tokio::task::JoinError) -> Aborted {
        match e.try_into_panic() {
            Ok(payload) => Aborted::Panicked {
                message: payload
                    .downcast_ref::<&str>()
                    .map(|m| Arc::from(*m))
                    .or_else(|| {
                        payload
                            .downcast_ref::<String>()
                            .map(|m| Arc::from(m.as_str()))
                    }),
            },
            Err(_) => Aborted::Cancelled,
        }
    }
}

/// A table of in-progress flights keyed by `K`, whose work gives `Result<T, E>`.
pub struct Flights<K, T, E> {
    inner: Arc<Mutex<Table<K, T, E>>>,
}

struct Table<K, T, E> {
    next_id: u64,
    flights: HashMap<K, (u64, Flight<T, E>)>,
}

impl<K, T, E> Default for Flights<K, T, E> {
    fn default() -> Self {
        Flights {
            inner: Arc::new(Mutex::new(Table {
                next_id: 0,
                flights: HashMap::new(),
            })),
        }
    }
}

impl<K, T, E> Flights<K, T, E>
where
    K: Eq + Hash + Clone + Send + 'static,
    T: Clone + Send + Sync + 'static,
    E: From<Aborted> + Clone + Send + Sync + 'static,
{
    /// Joins the flight for `key`, or starts one with `work` if none is in progress.
    /// Returns the shared result and whether this call started the flight.
    pub async fn run<F>(&self, key: K, work: impl FnOnce() -> F) -> (Result<T, E>, bool)
    where
        F: Future<Output = Result<T, E>> + Send + 'static,
    {
        let (flight, leader) = self.begin(key, work);
        (flight.await, leader)
    }

    /// The flight for `key`, joined if one is in progress, else started with `work` at once
    /// (before this returns, so a caller can decide under a lock of its own whether to start
    /// one); whether this call started it. The work runs whether or not the flight is awaited.
    pub fn begin<F>(&self, key: K, work: impl FnOnce() -> F) -> (Flight<T, E>, bool)
    where
        F: Future<Output = Result<T, E>> + Send + 'static,
    {
        let mut table = self.inner.lock().expect("flight table lock");
        if let Some((_, flight)) = table.flights.get(&key) {
            return (flight.clone(), false);
        }
        let id = table.next_id;
        table.next_id += 1;
        let task = tokio::spawn(work());
        let inner = self.inner.clone();
        let done_key = key.clone();
        let flight: Flight<T, E> = async move {
            let result = task.await.unwrap_or_else(|e| Err(Aborted::of(e).into()));
            // The table lock is held while this flight is inserted, so it is there now.
            let mut table = inner.lock().expect("flight table lock");
            if table
                .flights
                .get(&done_key)
                .is_some_and(|(fid, _)| *fid == id)
            {
                table.flights.remove(&done_key);
            }
            result
        }
        .boxed()
        .shared();
        table.flights.insert(key, (id, flight.clone()));
        // Drive the flight even if every caller goes away.
        tokio::spawn(flight.clone());
        (flight, true)
    }

    /// The flight for `key` in progress, to await without ever starting one.
    pub fn join(&self, key: &K) -> Option<Flight<T, E>> {
        self.inner
            .lock()
            .expect("flight table lock")
            .flights
            .get(key)
            .map(|(_, flight)| flight.clone())
    }

    /// Whether a flight for `key` is in progress.
    pub fn contains(&self, key: &K) -> bool {
        self.inner
            .lock()
            .expect("flight table lock")
            .flights
            .contains_key(key)
    }

    /// Number of flights in progress.
    pub fn len(&self) -> usize {
        self.inner.lock().expect("flight table lock").flights.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    type Error = Aborted;
    use std::time::Duration;

    #[tokio::test]
    async fn concurrent_calls_share_one_run_and_errors_are_not_kept() {
        let flights: Arc<Flights<&'static str, u32, Error>> = Arc::new(Flights::default());
        let runs = Arc::new(AtomicUsize::new(0));
        let mut joins = Vec::new();
        for _ in 0..20 {
            let (flights, runs) = (flights.clone(), runs.clone());
            joins.push(tokio::spawn(async move {
                flights
                    .run("k", move || async move {
                        runs.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        Err::<u32, _>(Aborted::Cancelled)
                    })
                    .await
                    .0
            }));
        }
        for j in joins {
            assert!(j.await.unwrap().is_err());
        }
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert!(flights.is_empty());
        let (ok, leader) = flights.run("k", || async { Ok(7) }).await;
        assert_eq!(ok.unwrap(), 7);
        assert!(leader);
    }

    #[tokio::test]
    async fn every_caller_learns_that_the_work_panicked() {
        let flights: Arc<Flights<u8, (), Error>> = Arc::new(Flights::default());
        let slow = flights.run(1, || async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            panic!("the work broke");
        });
        let joined = flights.run(1, || async { Ok(()) });
        let ((first, leader), (second, follower)) = tokio::join!(slow, joined);
        assert!(leader && !follower);
        let expected = Aborted::Panicked {
            message: Some("the work broke".into()),
        };
        assert_eq!(first.unwrap_err(), expected);
        assert_eq!(second.unwrap_err(), expected);
        assert_eq!(
            expected.to_string(),
            "background fetch failed: it panicked: the work broke"
        );
        assert!(flights.is_empty());
    }

    #[tokio::test]
    async fn work_survives_its_callers() {
        let flights: Flights<u8, (), Error> = Flights::default();
        let done = Arc::new(AtomicUsize::new(0));
        let d = done.clone();
        let call = flights.run(1, move || async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            d.fetch_add(1, Ordering::SeqCst);
            Ok(())
        });
        // The caller gives up almost at once.
        let _ = tokio::time::timeout(Duration::from_millis(5), call).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(done.load(Ordering::SeqCst), 1);
        assert!(flights.is_empty());
    }
}
