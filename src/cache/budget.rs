//! The disk budget: which objects to evict when the cache grows past `cache.max_size`.
//!
//! Provider archives, CLI release builds and the zips of module packages made for OCI clients
//! count against it alike ([`Budgeted`]): least recently used first, by bytes, whatever their
//! kind (a zip evicted is made again from its package when next asked for). An object that a client is reading holds
//! a [`Lease`] and is never chosen. The budget only decides; the mirror removes what it returns.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use crate::records::releases::ReleaseKey;
use crate::records::{ArchiveKey, ModuleKey};

/// An object the budget accounts for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Budgeted {
    /// A provider archive.
    Archive(ArchiveKey),
    /// A CLI release build (zip or `.tar.gz`).
    Release(ReleaseKey),
    /// A module package's zip (an OCI layer).
    ModuleZip(ModuleKey),
}

impl From<&ModuleKey> for Budgeted {
    fn from(key: &ModuleKey) -> Budgeted {
        Budgeted::ModuleZip(key.clone())
    }
}

impl From<&ArchiveKey> for Budgeted {
    fn from(key: &ArchiveKey) -> Budgeted {
        Budgeted::Archive(key.clone())
    }
}

impl From<&ReleaseKey> for Budgeted {
    fn from(key: &ReleaseKey) -> Budgeted {
        Budgeted::Release(key.clone())
    }
}

impl std::fmt::Display for Budgeted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Budgeted::Archive(key) => write!(f, "archive {key}"),
            Budgeted::Release(key) => write!(f, "release build {key}"),
            Budgeted::ModuleZip(key) => write!(f, "module zip {key}"),
        }
    }
}

/// Sizes and recency of every archive and release build in the store; kept only when
/// `cache.max_size` is set.
pub struct Budget {
    max: u64,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    tick: u64,
    total: u64,
    entries: HashMap<Budgeted, Slot>,
}

struct Slot {
    size: u64,
    last_used: u64,
    readers: usize,
}

/// Keeps an object from being evicted while it is read.
pub struct Lease {
    budget: Arc<Budget>,
    key: Budgeted,
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut state = self.budget.state.lock().expect("budget lock");
        if let Some(slot) = state.entries.get_mut(&self.key) {
            slot.readers = slot.readers.saturating_sub(1);
        }
    }
}

impl Budget {
    /// `max`: the byte limit.
    pub fn new(max: u64) -> Arc<Budget> {
        Arc::new(Budget {
            max,
            state: Mutex::new(State::default()),
        })
    }

    /// Starts from what the store holds; `last_used` orders the existing objects.
    pub fn load(&self, mut entries: Vec<(Budgeted, u64, SystemTime)>) {
        entries.sort_by_key(|(_, _, used)| *used);
        let mut state = self.state.lock().expect("budget lock");
        for (key, size, _) in entries {
            state.tick += 1;
            let tick = state.tick;
            if let Some(old) = state.entries.insert(
                key,
                Slot {
                    size,
                    last_used: tick,
                    readers: 0,
                },
            ) {
                state.total -= old.size;
            }
            state.total += size;
        }
    }

    /// Marks an object as used now and leases it until the lease is dropped.
    pub fn lease(self: &Arc<Self>, key: impl Into<Budgeted>, size: u64) -> Lease {
        let key = key.into();
        let mut state = self.state.lock().expect("budget lock");
        state.tick += 1;
        let tick = state.tick;
        match state.entries.get_mut(&key) {
            Some(slot) => {
                slot.last_used = tick;
                slot.readers += 1;
            }
            None => {
                state.entries.insert(
                    key.clone(),
                    Slot {
                        size,
                        last_used: tick,
                        readers: 1,
                    },
                );
                state.total += size;
            }
        }
        Lease {
            budget: self.clone(),
            key,
        }
    }

    /// Records a newly stored object as the most recently used.
    pub fn added(&self, key: impl Into<Budgeted>, size: u64) {
        let key = key.into();
        let mut state = self.state.lock().expect("budget lock");
        state.tick += 1;
        let tick = state.tick;
        let readers = state.entries.get(&key).map(|s| s.readers).unwrap_or(0);
        if let Some(old) = state.entries.insert(
            key,
            Slot {
                size,
                last_used: tick,
                readers,
            },
        ) {
            state.total -= old.size;
        }
        state.total += size;
    }

    /// Forgets an object that left the store by other means (e.g. quarantine).
    pub fn removed(&self, key: impl Into<Budgeted>) {
        let key = key.into();
        let mut state = self.state.lock().expect("budget lock");
        if let Some(old) = state.entries.remove(&key) {
            state.total -= old.size;
        }
    }

    /// The objects to evict, least recently used first, so that the total fits the limit.
    /// They are forgotten here; the caller removes them from the store.
    pub fn victims(&self) -> Vec<(Budgeted, u64)> {
        let max = self.max;
        let mut state = self.state.lock().expect("budget lock");
        if state.total <= max {
            return Vec::new();
        }
        let mut candidates: Vec<(u64, Budgeted, u64)> = state
            .entries
            .iter()
            .filter(|(_, slot)| slot.readers == 0)
            .map(|(key, slot)| (slot.last_used, key.clone(), slot.size))
            .collect();
        candidates.sort_by_key(|(used, _, _)| *used);
        let mut out = Vec::new();
        for (_, key, size) in candidates {
            if state.total <= max {
                break;
            }
            state.entries.remove(&key);
            state.total -= size;
            out.push((key, size));
        }
        out
    }

    /// Bytes accounted for.
    pub fn total(&self) -> u64 {
        self.state.lock().expect("budget lock").total
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::{Platform, ProviderAddr, Version};

    fn archive(n: u32) -> ArchiveKey {
        ArchiveKey {
            addr: ProviderAddr::new("registry.terraform.io", "acme", "foo").unwrap(),
            version: Version::parse(&format!("1.0.{n}")).unwrap(),
            platform: Platform::parse("linux_amd64").unwrap(),
        }
    }

    fn key(n: u32) -> Budgeted {
        Budgeted::from(&archive(n))
    }

    fn build(n: u32) -> ReleaseKey {
        ReleaseKey {
            product: crate::records::releases::Product::Tofu,
            version: Version::parse(&format!("1.8.{n}")).unwrap(),
            platform: Platform::parse("linux_amd64").unwrap(),
            packing: crate::records::releases::Packing::TarGz,
        }
    }

    #[test]
    fn evicts_least_recently_used_first_and_never_leased() {
        let budget = Budget::new(250);
        budget.load(vec![
            (key(1), 100, SystemTime::UNIX_EPOCH),
            (key(2), 100, SystemTime::now()),
        ]);
        let held = budget.lease(key(1), 100); // 1 is now the most recent, and in use
        budget.added(key(3), 100);
        assert_eq!(budget.total(), 300);
        let victims = budget.victims();
        assert_eq!(victims, vec![(key(2), 100)]);
        assert_eq!(budget.total(), 200);
        budget.added(key(4), 100);
        // 1 is the least recently used now but still leased: 3 goes instead.
        assert_eq!(budget.victims(), vec![(key(3), 100)]);
        drop(held);
        budget.added(key(5), 100);
        assert_eq!(budget.victims(), vec![(key(1), 100)]);
    }

    #[test]
    fn release_builds_and_archives_share_one_budget() {
        let budget = Budget::new(250);
        budget.load(vec![
            (key(1), 100, SystemTime::UNIX_EPOCH),
            (Budgeted::from(&build(1)), 100, SystemTime::now()),
        ]);
        // A new build pushes out the oldest object, an archive.
        budget.added(&build(2), 100);
        assert_eq!(budget.victims(), vec![(key(1), 100)]);
        // A build being read is not evicted; the archive after it goes instead.
        let reading = budget.lease(&build(1), 100);
        budget.added(&archive(2), 100);
        assert_eq!(budget.victims(), vec![(Budgeted::from(&build(2)), 100)]);
        drop(reading);
        budget.added(&archive(3), 100);
        assert_eq!(budget.victims(), vec![(Budgeted::from(&build(1)), 100)]);
        assert_eq!(budget.total(), 200);
        budget.removed(&archive(2));
        assert_eq!(budget.total(), 100);
    }
}
