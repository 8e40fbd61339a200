// SPDX-License-Identifier: GPL-2.0

//! ferry_blk: remote block devices over ferry.
//!
//! One module holds both roles: a *target* exports block devices of its host
//! under a name ([`target`]), and a *client* maps a target's export as a
//! local disk, `/dev/ferryblkN`, with one blk-mq hardware queue per ferry
//! channel ([`client`]). It uses ferry only through its kernel API
//! (`rust/ferry_api.rs`), and the block layer through `rust/block`; it is
//! controlled over the generic netlink family `ferry-blk` ([`netlink`],
//! `ferryctl blk`). Documentation/blk.md describes it, and its protocol
//! ([`wire`]).

#[path = "../../rust/blk_bindings.rs"]
mod bindings;
#[path = "../../rust/blk_ferry.rs"]
pub mod blk_ferry;
#[path = "../../rust/blk_sys.rs"]
pub mod blk_sys;
#[path = "../../rust/block.rs"]
pub mod block;
#[path = "../../rust/ferry_api.rs"]
pub mod ferry_api;
#[path = "../../rust/ferry_blk_nl.rs"]
pub mod ferry_blk_nl;
#[path = "../../rust/genl.rs"]
pub mod genl;
#[path = "../../rust/netns.rs"]
pub mod netns;
// (Its `pr_info_limited!` is ferry's.)
#[allow(unused)]
#[path = "../../rust/ratelimit.rs"]
pub mod ratelimit;
#[path = "../../rust/slot.rs"]
pub mod slot;
#[path = "../../rust/work.rs"]
pub mod work;

mod client;
mod events;
mod indices;
mod netlink;
mod stats;
mod target;
mod wire;

use kernel::{
    c_str, new_mutex,
    prelude::*,
    sync::{Arc, Mutex},
};

use blk_sys::{capable_sys_admin, module_get, module_put};

use client::{MapParams, Mapping};
use indices::DiskIndices;
use slot::{Published, Slot};
use target::{Target, TargetService};

module! {
    type: FerryBlk,
    name: "ferry_blk",
    authors: ["The ferry authors"],
    description: "ferry_blk: remote block devices over ferry",
    license: "GPL",
    imports_ns: ["FERRY"],
}

/// What the netlink handlers reach.
#[pin_data]
pub(crate) struct State {
    target: Arc<Target>,
    /// The mappings, by index.
    #[pin]
    maps: Mutex<KVec<Mapping>>,
    /// The disks' numbers.
    indices: Arc<DiskIndices>,
    /// Where mappings act on their target's notices, and the tick runs
    /// (drained when the module's state goes, at unload).
    notices: work::OwnedQueue,
}

/// Period of the module's tick, which drives the mappings' timers
/// (fast-fail, give-up, the reopen's deadline) and sends the target's
/// notices again, in milliseconds.
const TICK_MS: u32 = 1000;

/// One tick: each mapping's timers, the target's notices to send again,
/// then the next tick.
fn tick(t: &Arc<work::Ticker>) -> Result {
    let state = State::get()?;
    for m in state.maps.lock().iter() {
        m.tick();
    }
    state.target.tick();
    t.schedule(&state.notices, TICK_MS)
}

/// Stops the tick when the module goes, before its state (whose queue the
/// tick runs on) does.
struct TickerGuard(Arc<work::Ticker>);

impl Drop for TickerGuard {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// The module's state, for the netlink handlers (which carry no context).
static STATE: Slot<State> = Slot::new();

impl State {
    /// The module's state; `ENODEV` while it loads or unloads.
    pub(crate) fn get() -> Result<Arc<State>> {
        STATE.get().ok_or(ENODEV)
    }

    /// Maps an export: the new mapping's index. Sleeps (the session's
    /// connect, the target's answer).
    fn map(&self, p: &MapParams<'_>) -> Result<u32> {
        // Taken first: an unload that began meanwhile refuses the map.
        if !module_get() {
            return Err(ENODEV);
        }
        let m = match self.indices.take().and_then(|index| Mapping::new(index, p)) {
            Ok(m) => m,
            Err(e) => {
                module_put();
                return Err(e);
            }
        };
        pr_info!(
            "{}: export {} mapped, {} sectors{}\n",
            m.disk_name(),
            m.export,
            m.sectors(),
            if m.read_only() { ", read-only" } else { "" }
        );
        let index = m.index();
        let mut maps = self.maps.lock();
        if maps.push(m, GFP_KERNEL).is_err() {
            drop(maps);
            // The mapping went with the error, by force (its `Drop`).
            module_put();
            return Err(ENOMEM);
        }
        Ok(index)
    }

    /// Runs `f` on mapping `index`.
    fn with_map<R>(&self, index: u32, f: impl FnOnce(&Mapping) -> Result<R>) -> Result<R> {
        let maps = self.maps.lock();
        let m = maps.iter().find(|m| m.index() == index).ok_or(ENOENT)?;
        f(m)
    }

    /// Removes mapping `index`: `EBUSY` while its disk is open, unless
    /// `force`. Sleeps.
    fn unmap(&self, index: u32, force: bool) -> Result {
        let m = {
            let mut maps = self.maps.lock();
            let i = maps.iter().position(|m| m.index() == index).ok_or(ENOENT)?;
            // Without force, the disk must be closed and its target
            // reachable: its requests must be able to drain.
            if (maps[i].in_use() || !maps[i].reachable()) && !force {
                return Err(EBUSY);
            }
            maps.remove(i).map_err(|_| ENOENT)?
        };
        pr_info!(
            "{}: unmapped{}\n",
            m.disk_name(),
            if force { " (forced)" } else { "" }
        );
        let sectors = m.sectors();
        m.remove(force);
        netlink::map_event(ferry_blk_nl::cmd::MAP_DEL_NTF, &m, sectors);
        drop(m);
        module_put();
        Ok(())
    }
}

/// Closes the target's exports when the module goes, once its service is
/// gone (see [`Target::shutdown`]).
struct ExportsGuard(Arc<Target>);

impl Drop for ExportsGuard {
    fn drop(&mut self) {
        self.0.shutdown();
    }
}

/// The loaded module: the tick stops first on unload, then the netlink
/// family goes, then the service (its sessions closed), then the exports
/// (mappings keep the module loaded while they exist; exports do not).
struct FerryBlk {
    _ticker: TickerGuard,
    _netlink: Published<genl::Registration>,
    _state: Published<State>,
    _service: ferry_api::Registration<TargetService>,
    _exports: ExportsGuard,
}

impl kernel::Module for FerryBlk {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let target = Target::new()?;
        let exports = ExportsGuard(target.clone());
        let service = ferry_api::Registration::new(
            wire::SERVICE,
            Arc::new(TargetService(target.clone()), GFP_KERNEL)?,
        )?;
        let notices = work::OwnedQueue::new(c_str!("ferry_blk_notices"))?;
        let indices = DiskIndices::new()?;
        let state = Arc::pin_init(
            pin_init!(State {
                target,
                maps <- new_mutex!(KVec::new()),
                indices,
                notices,
            }),
            GFP_KERNEL,
        )?;
        let ticker = work::Ticker::new(tick)?;
        let state = STATE.publish(state)?;
        // Once the state is there for the tick to find.
        ticker.schedule(&State::get()?.notices, TICK_MS)?;
        let ticker = TickerGuard(ticker);
        let netlink = ferry_blk_nl::register()?;
        Ok(Self {
            _ticker: ticker,
            _netlink: netlink,
            _state: state,
            _service: service,
            _exports: exports,
        })
    }
}
