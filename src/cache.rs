//! What provender keeps, on top of a [`Storage`](crate::storage::Storage): verified archives
//! with their records ([`Archives`]), provider metadata ([`MetaStore`]: a bounded in-memory LRU
//! in front of the store), the local staging area for downloads in progress ([`Staging`]), the
//! single-flight table that makes concurrent misses share one upstream fetch, and the LRU
//! budget behind `cache.max_size`.
//!
//! Nothing here speaks HTTP or knows about origin registries.
//!
//! Layout in the store (a directory for the disk backend, a bucket prefix for object stores):
//!
//! ```text
//! archives/<host>/<namespace>/<type>/<version>/<archive>.zip        committed, verified archive
//! archives/<host>/<namespace>/<type>/<version>/<archive>.zip.json   its record (the commit point)
//! metadata/<host>/<namespace>/<type>/index.json                     version list + fetch time
//! metadata/<host>/<namespace>/<type>/<version>.json                 download metadata per platform
//! metadata/<host>/<namespace>/<type>/<version>.SHA256SUMS.<n>[.sig]  the origin's checksum files
//! quarantine/<host>/.../<archive>.zip.<unix time>                   archives that failed re-verification
//! modules/<host>/<namespace>/<name>/<system>/...                   module version lists and packages
//! ```
//!
//! and always on local disk, under `cache.dir`: `tmp/` (downloads in progress) and `tls/`
//! (the generated CA and certificate).

mod archives;
mod budget;
mod flight;
mod listing;
mod meta;
mod modules;
mod staging;

pub use archives::{Archives, StoredArchive, StoredEntry, zip_key};
pub use budget::{Budget, Lease};
pub use flight::{Aborted, Flights};
pub use listing::{
    FreshnessRules, Listing, Listings, NotCached, Verdict, module_list_key, provider_list_key,
};
pub use meta::MetaStore;
pub use modules::{ModuleStore, StoredModule, package_key};
pub use staging::{ScratchDir, StagedFile, Staging};
