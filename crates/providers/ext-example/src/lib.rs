//! `loop`: an external provider, built as `libofi_ext_example.so` and loaded
//! by ofi at run time (FI_PROVIDER_PATH, or `registry::load_external`).
//!
//! It moves messages between endpoints of one process: a send copies the
//! payload into the destination's inbox, where the core's matching engine
//! pairs it with posted receives. It shows everything an external provider
//! needs: an offer, a fabric, a domain with address handling, an endpoint
//! that drives the core's completion queues, and the versioned entry point.

#![deny(unsafe_code)]

use ofi_core::consts::*;
use ofi_core::error::{errno, Error, Result};
use ofi_core::info::*;
use ofi_core::object::{EpBindings, RecvOp, SendOp};
use ofi_core::provider::*;
use ofi_core::util::cq::{CqErrEntry, CqTaggedEntry};
use ofi_core::util::iov::{copy_from_iov, copy_to_iov, iov_len};
use ofi_core::util::matching::{MatchQueues, PostedRecv, Unexpected, MAX_IOV};
use std::collections::HashMap;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// Provider name.
pub const NAME: &str = "loop";

/// The loop provider.
#[derive(Debug, Default)]
pub struct LoopProvider;

fn offer() -> Info {
    Info {
        caps: FI_MSG | FI_TAGGED | FI_SEND | FI_RECV | FI_LOCAL_COMM,
        addr_format: addr_format::FI_ADDR_STR,
        tx_attr: TxAttr {
            caps: FI_MSG | FI_TAGGED | FI_SEND,
            inject_size: 1024,
            size: 256,
            iov_limit: MAX_IOV,
            msg_order: order::FI_ORDER_SAS,
            ..Default::default()
        },
        rx_attr: RxAttr {
            caps: FI_MSG | FI_TAGGED | FI_RECV,
            size: 256,
            iov_limit: MAX_IOV,
            msg_order: order::FI_ORDER_SAS,
            ..Default::default()
        },
        ep_attr: EpAttr {
            ep_type: ep_type::FI_EP_RDM,
            max_msg_size: 1 << 30,
            tx_ctx_cnt: 1,
            rx_ctx_cnt: 1,
            ..Default::default()
        },
        domain_attr: DomainAttr {
            name: Some(NAME.into()),
            threading: threading::FI_THREAD_SAFE,
            control_progress: progress::FI_PROGRESS_AUTO,
            data_progress: progress::FI_PROGRESS_AUTO,
            resource_mgmt: resource_mgmt::FI_RM_ENABLED,
            cq_data_size: 8,
            cq_cnt: 64,
            ep_cnt: 64,
            mr_iov_limit: 1,
            ..Default::default()
        },
        fabric_attr: FabricAttr {
            name: Some(NAME.into()),
            prov_name: Some(NAME.into()),
            prov_version: fi_version(0, 1),
            api_version: FI_VERSION_CURRENT,
        },
        ..Default::default()
    }
}

impl Provider for LoopProvider {
    fn name(&self) -> &str {
        NAME
    }
    fn version(&self) -> u32 {
        fi_version(0, 1)
    }
    fn getinfo(&self, _req: &GetinfoRequest<'_>) -> Result<Vec<Info>> {
        Ok(vec![offer()])
    }
    fn fabric(&self, _attr: &FabricAttr) -> Result<Arc<dyn FabricOps>> {
        Ok(Arc::new(LoopFabric))
    }
}

struct LoopFabric;

impl FabricOps for LoopFabric {
    fn domain(&self, _info: &Info) -> Result<Arc<dyn DomainOps>> {
        Ok(Arc::new(LoopDomain))
    }
}

struct LoopDomain;

struct LoopAddr;

fn parse(addr: &[u8]) -> Result<u32> {
    let end = addr.iter().position(|&c| c == 0).unwrap_or(addr.len());
    std::str::from_utf8(&addr[..end])
        .ok()
        .and_then(|s| s.strip_prefix("loop://"))
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| Error::inval("loop address must look like loop://N"))
}

impl AddrOps for LoopAddr {
    fn canonical(&self, addr: &[u8]) -> Result<Vec<u8>> {
        Ok(format!("loop://{}\0", parse(addr)?).into_bytes())
    }
    fn to_string(&self, addr: &[u8]) -> String {
        parse(addr)
            .map(|n| format!("loop://{n}"))
            .unwrap_or_else(|_| "loop://?".into())
    }
    fn resolve(&self, node: &str, _service: &str) -> Result<Vec<u8>> {
        self.canonical(format!("loop://{node}").as_bytes())
    }
}

impl DomainOps for LoopDomain {
    fn endpoint(&self, _info: &Info) -> Result<Arc<dyn EndpointOps>> {
        static NEXT: AtomicU32 = AtomicU32::new(1);
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        let ep = Arc::new(LoopEp {
            id,
            st: Mutex::new(State {
                b: None,
                mq: MatchQueues::new(64),
            }),
        });
        directory()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, Arc::downgrade(&ep));
        Ok(ep)
    }
    fn addr_ops(&self) -> Arc<dyn AddrOps> {
        Arc::new(LoopAddr)
    }
}

fn directory() -> &'static Mutex<HashMap<u32, Weak<LoopEp>>> {
    static D: OnceLock<Mutex<HashMap<u32, Weak<LoopEp>>>> = OnceLock::new();
    D.get_or_init(Default::default)
}

struct State {
    b: Option<EpBindings>,
    mq: MatchQueues<Vec<u8>>,
}

struct LoopEp {
    id: u32,
    st: Mutex<State>,
}

impl LoopEp {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Delivers `data` into a receive and completes it.
    fn complete_recv(b: &EpBindings, r: &PostedRecv, data: &[u8], tag: u64, tagged: bool) {
        // SAFETY: the receive's poster promised the iov stays valid until completion.
        #[allow(unsafe_code)]
        let n = unsafe { copy_to_iov(r.iov(), 0, data) };
        let flags = FI_RECV | if tagged { FI_TAGGED } else { FI_MSG };
        if let Some(cq) = &b.rx_cq {
            if n < data.len() {
                cq.push_err(
                    CqErrEntry {
                        op_context: r.context,
                        flags,
                        len: n,
                        olen: data.len() - n,
                        err: errno::FI_ETRUNC,
                        tag,
                        ..Default::default()
                    },
                    FI_ADDR_NOTAVAIL,
                );
            } else {
                cq.push(
                    CqTaggedEntry {
                        op_context: r.context,
                        flags,
                        len: n,
                        tag,
                        ..Default::default()
                    },
                    FI_ADDR_NOTAVAIL,
                );
            }
        }
    }
}

impl Progress for LoopEp {
    fn progress(&self) {}
    fn arm(&self) -> bool {
        true
    }
    fn disarm(&self) {}
    fn wait_fd(&self) -> Option<RawFd> {
        None
    }
}

impl EndpointOps for LoopEp {
    fn enable(&self, b: EpBindings) -> Result<()> {
        self.lock().b = Some(b);
        Ok(())
    }
    fn getname(&self) -> Result<Vec<u8>> {
        Ok(format!("loop://{}\0", self.id).into_bytes())
    }
    #[allow(unsafe_code)]
    unsafe fn post_send(&self, op: &SendOp<'_>) -> Result<()> {
        let b = self
            .lock()
            .b
            .clone()
            .ok_or_else(|| Error::new(errno::FI_EOPBADSTATE, "loop: endpoint not enabled"))?;
        let av =
            b.av.as_ref()
                .ok_or_else(|| Error::new(errno::FI_ENOAV, "loop: no AV"))?;
        let dest = parse(&av.lookup(op.dest)?)?;
        let peer = directory()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&dest)
            .and_then(Weak::upgrade)
            .ok_or_else(|| {
                Error::new(
                    errno::FI_EHOSTUNREACH,
                    format!("loop: endpoint {dest} is gone"),
                )
            })?;
        let mut data = vec![0u8; iov_len(op.iov)];
        // SAFETY: the send's poster promised the iov is readable for this call.
        unsafe { copy_from_iov(op.iov, 0, &mut data) };
        {
            let mut st = peer.lock();
            let pb = st.b.clone();
            match (st.mq.find_posted(op.tagged, FI_ADDR_NOTAVAIL, op.tag), pb) {
                (Some(i), Some(pb)) => {
                    let r = st.mq.take_posted(op.tagged, i).unwrap_or_default();
                    drop(st);
                    LoopEp::complete_recv(&pb, &r, &data, op.tag, op.tagged);
                }
                _ => st.mq.push_unexpected(
                    op.tagged,
                    Unexpected {
                        src: FI_ADDR_NOTAVAIL,
                        tag: op.tag,
                        data: 0,
                        flags: 0,
                        len: data.len(),
                        claimed: None,
                        payload: data,
                    },
                ),
            }
        }
        if b.tx_completion(op.flags) {
            if let Some(cq) = &b.tx_cq {
                cq.push(
                    CqTaggedEntry {
                        op_context: op.context,
                        flags: FI_SEND | if op.tagged { FI_TAGGED } else { FI_MSG },
                        ..Default::default()
                    },
                    FI_ADDR_NOTAVAIL,
                );
            }
        }
        Ok(())
    }
    #[allow(unsafe_code)]
    unsafe fn post_recv(&self, op: &RecvOp<'_>) -> Result<()> {
        if op.iov.len() > MAX_IOV {
            return Err(Error::inval("loop: too many iov entries"));
        }
        let mut st = self.lock();
        let b =
            st.b.clone()
                .ok_or_else(|| Error::new(errno::FI_EOPBADSTATE, "loop: endpoint not enabled"))?;
        let mut r = PostedRecv {
            iov_cnt: op.iov.len(),
            len: iov_len(op.iov),
            src: FI_ADDR_UNSPEC,
            tag: op.tag,
            ignore: op.ignore,
            context: op.context,
            flags: op.flags,
            ..Default::default()
        };
        r.iov[..op.iov.len()].copy_from_slice(op.iov);
        let ignore = if op.tagged { op.ignore } else { u64::MAX };
        if let Some(i) = st
            .mq
            .find_unexpected(op.tagged, FI_ADDR_UNSPEC, op.tag, ignore)
        {
            let u = st
                .mq
                .take_unexpected(op.tagged, i)
                .expect("index from find");
            drop(st);
            LoopEp::complete_recv(&b, &r, &u.payload, u.tag, op.tagged);
            return Ok(());
        }
        st.mq.post(op.tagged, r);
        Ok(())
    }
    fn cancel(&self, context: usize) -> Result<()> {
        let mut st = self.lock();
        let (tagged, r) = st
            .mq
            .cancel(context)
            .ok_or_else(|| Error::new(errno::FI_ENOENT, "loop: no such receive"))?;
        if let Some(cq) = st.b.as_ref().and_then(|b| b.rx_cq.clone()) {
            cq.push_err(
                CqErrEntry {
                    op_context: r.context,
                    flags: FI_RECV | if tagged { FI_TAGGED } else { FI_MSG },
                    err: errno::FI_ECANCELED,
                    ..Default::default()
                },
                FI_ADDR_NOTAVAIL,
            );
        }
        Ok(())
    }
    fn setopt(&self, name: i32, _value: usize) -> Result<()> {
        Err(Error::new(
            errno::FI_ENOPROTOOPT,
            format!("loop: option {name} is not supported"),
        ))
    }
    fn getopt(&self, name: i32) -> Result<usize> {
        Err(Error::new(
            errno::FI_ENOPROTOOPT,
            format!("loop: option {name} is not supported"),
        ))
    }
    fn close(&self) {
        directory()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.id);
        let mut st = self.lock();
        st.mq.drain_all();
        st.b = None;
    }
}

#[allow(unsafe_code)]
mod entry {
    ofi_core::export_provider!(super::LoopProvider::default);
}
