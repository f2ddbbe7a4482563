//! The C ABI against Debian's libfabric 1.17 headers and library:
//! - every struct, union and ops table of `crate::abi` has the size,
//!   alignment, field offsets and field sizes gcc gives the C type;
//! - the C-only constants have the headers' values;
//! - the built `libfabric.so` has SONAME `libfabric.so.1` and exports exactly
//!   Debian's `fi_*` symbols with the same versions;
//! - the top-level entry points behave (tests/c/top.c);
//! - `fi_av_insert` refuses malformed raw addresses without crashing and
//!   still inserts valid ones (tests/c/av_insert.c);
//! - `fi_tostr` prints what Debian's libfabric prints (tests/c/tostr.c run
//!   on both libraries), and for ofi's offers what `ofi info -v` prints.
#![allow(unsafe_code)]

use fabric::abi::{self, *};
use fabric::compat;
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::mem::{align_of, offset_of, size_of};
use std::path::{Path, PathBuf};
use std::process::Command;

/// One struct: its C name, size, alignment and (field, offset, size) rows.
struct Layout {
    c_type: String,
    size: usize,
    align: usize,
    fields: Vec<(&'static str, usize, usize)>,
}

/// The size of a field, from a never-called projection.
fn field_size<T, F>(_: fn(*const T) -> *const F) -> usize {
    size_of::<F>()
}

macro_rules! layouts {
    ($($kw:literal $s:ident { $($f:ident),* $(,)? })*) => {
        vec![$(Layout {
            c_type: format!("{} {}", $kw, stringify!($s)),
            size: size_of::<abi::$s>(),
            align: align_of::<abi::$s>(),
            fields: vec![$((
                stringify!($f).trim_start_matches("r#"),
                offset_of!(abi::$s, $f),
                // SAFETY: the projection is never called, only its type is used.
                field_size::<abi::$s, _>(|p| unsafe { &raw const (*p).$f }),
            )),*],
        }),*]
    };
}

/// Every struct and ops table of the headers, every field.
fn all_layouts() -> Vec<Layout> {
    layouts! {
        "struct" fi_ioc { addr, count }
        "struct" fi_tx_attr { caps, mode, op_flags, msg_order, comp_order, inject_size, size, iov_limit, rma_iov_limit, tclass }
        "struct" fi_rx_attr { caps, mode, op_flags, msg_order, comp_order, total_buffered_recv, size, iov_limit }
        "struct" fi_ep_attr { r#type, protocol, protocol_version, max_msg_size, msg_prefix_size, max_order_raw_size,
            max_order_war_size, max_order_waw_size, mem_tag_format, tx_ctx_cnt, rx_ctx_cnt, auth_key_size, auth_key }
        "struct" fi_domain_attr { domain, name, threading, control_progress, data_progress, resource_mgmt, av_type,
            mr_mode, mr_key_size, cq_data_size, cq_cnt, ep_cnt, tx_ctx_cnt, rx_ctx_cnt, max_ep_tx_ctx, max_ep_rx_ctx,
            max_ep_stx_ctx, max_ep_srx_ctx, cntr_cnt, mr_iov_limit, caps, mode, auth_key, auth_key_size,
            max_err_data, mr_cnt, tclass }
        "struct" fi_fabric_attr { fabric, name, prov_name, prov_version, api_version }
        "struct" fi_info { next, caps, mode, addr_format, src_addrlen, dest_addrlen, src_addr, dest_addr, handle,
            tx_attr, rx_attr, ep_attr, domain_attr, fabric_attr, nic }
        "struct" fi_device_attr { name, device_id, device_version, vendor_id, driver, firmware }
        "struct" fi_pci_attr { domain_id, bus_id, device_id, function_id }
        "struct" fi_bus_attr { bus_type, attr }
        "struct" fi_link_attr { address, mtu, speed, state, network_type }
        "struct" fi_ops { size, close, bind, control, ops_open, tostr, ops_set }
        "struct" fid { fclass, context, ops }
        "struct" fi_ops_fabric { size, domain, passive_ep, eq_open, wait_open, trywait, domain2 }
        "struct" fid_fabric { fid, ops, api_version }
        "struct" fid_nic { fid, device_attr, bus_attr, link_attr, prov_attr }
        "struct" fi_alias { fid, flags }
        "struct" fi_fid_var { name, val }
        "struct" fi_mr_raw_attr { flags, base_addr, raw_key, key_size }
        "struct" fi_mr_map_raw { flags, base_addr, raw_key, key_size, key }
        "struct" fi_param { name, r#type, help_string, value }
        "struct" fi_context { internal }
        "struct" fi_context2 { internal }
        "struct" fi_recv_context { ep, context }
        "struct" fi_provider { version, fi_version, context, name, getinfo, fabric, cleanup }
        "struct" fi_av_attr { r#type, rx_ctx_bits, count, ep_per_node, name, map_addr, flags }
        "struct" fi_av_set_attr { count, start_addr, end_addr, stride, comm_key_size, comm_key, flags }
        "struct" fi_ops_av { size, insert, insertsvc, insertsym, remove, lookup, straddr, av_set }
        "struct" fid_av { fid, ops }
        "struct" fid_mr { fid, mem_desc, key }
        "struct" fi_mr_attr { mr_iov, iov_count, access, offset, requested_key, context, auth_key_size, auth_key,
            iface, device }
        "struct" fi_mr_modify { flags, attr }
        "struct" fi_hmem_override_ops { size, copy_from_hmem_iov, copy_to_hmem_iov }
        "struct" fi_ops_domain { size, av_open, cq_open, endpoint, scalable_ep, cntr_open, poll_open, stx_ctx,
            srx_ctx, query_atomic, query_collective, endpoint2 }
        "struct" fi_ops_mr { size, reg, regv, regattr }
        "struct" fid_domain { fid, ops, mr }
        "struct" fi_wait_attr { wait_obj, flags }
        "struct" fi_ops_wait { size, wait }
        "struct" fid_wait { fid, ops }
        "struct" fi_mutex_cond { mutex, cond }
        "struct" fi_wait_pollfd { change_index, nfds, fd }
        "struct" fi_poll_attr { flags }
        "struct" fi_ops_poll { size, poll, poll_add, poll_del }
        "struct" fid_poll { fid, ops }
        "struct" fi_eq_attr { size, flags, wait_obj, signaling_vector, wait_set }
        "struct" fi_eq_entry { fid, context, data }
        "struct" fi_eq_err_entry { fid, context, data, err, prov_errno, err_data, err_data_size }
        "struct" fi_eq_cm_entry { fid, info, data }
        "struct" fi_ops_eq { size, read, readerr, write, sread, strerror }
        "struct" fid_eq { fid, ops }
        "struct" fi_cq_entry { op_context }
        "struct" fi_cq_msg_entry { op_context, flags, len }
        "struct" fi_cq_data_entry { op_context, flags, len, buf, data }
        "struct" fi_cq_tagged_entry { op_context, flags, len, buf, data, tag }
        "struct" fi_cq_err_entry { op_context, flags, len, buf, data, tag, olen, err, prov_errno, err_data,
            err_data_size }
        "struct" fi_cq_attr { size, flags, format, wait_obj, signaling_vector, wait_cond, wait_set }
        "struct" fi_ops_cq { size, read, readfrom, readerr, sread, sreadfrom, signal, strerror }
        "struct" fid_cq { fid, ops }
        "struct" fi_cntr_attr { events, wait_obj, wait_set, flags }
        "struct" fi_ops_cntr { size, read, readerr, add, set, wait, adderr, seterr }
        "struct" fid_cntr { fid, ops }
        "struct" fi_msg { msg_iov, desc, iov_count, addr, context, data }
        "struct" fi_ops_ep { size, cancel, getopt, setopt, tx_ctx, rx_ctx, rx_size_left, tx_size_left }
        "struct" fi_ops_msg { size, recv, recvv, recvmsg, send, sendv, sendmsg, inject, senddata, injectdata }
        "struct" fid_ep { fid, ops, cm, msg, rma, tagged, atomic, collective }
        "struct" fid_pep { fid, ops, cm }
        "struct" fid_stx { fid, ops }
        "struct" fid_mc { fid, fi_addr }
        "struct" fi_ops_cm { size, setname, getname, getpeer, connect, listen, accept, reject, shutdown, join }
        "struct" fi_rma_iov { addr, len, key }
        "struct" fi_rma_ioc { addr, count, key }
        "struct" fi_msg_rma { msg_iov, desc, iov_count, addr, rma_iov, rma_iov_count, context, data }
        "struct" fi_ops_rma { size, read, readv, readmsg, write, writev, writemsg, inject, writedata, injectdata }
        "struct" fi_msg_tagged { msg_iov, desc, iov_count, addr, tag, ignore, context, data }
        "struct" fi_ops_tagged { size, recv, recvv, recvmsg, send, sendv, sendmsg, inject, senddata, injectdata }
        "struct" fi_atomic_attr { count, size }
        "struct" fi_msg_atomic { msg_iov, desc, iov_count, addr, rma_iov, rma_iov_count, datatype, op, context, data }
        "struct" fi_msg_fetch { msg_iov, desc, iov_count }
        "struct" fi_msg_compare { msg_iov, desc, iov_count }
        "struct" fi_ops_atomic { size, write, writev, writemsg, inject, readwrite, readwritev, readwritemsg,
            compwrite, compwritev, compwritemsg, writevalid, readwritevalid, compwritevalid }
        "struct" fi_trigger_threshold { cntr, threshold }
        "struct" fi_trigger_var { datatype, count, addr, value }
        "struct" fi_trigger_xpu { count, iface, device, var }
        "struct" fi_op_msg { ep, msg, flags }
        "struct" fi_op_tagged { ep, msg, flags }
        "struct" fi_op_rma { ep, msg, flags }
        "struct" fi_op_atomic { ep, msg, flags }
        "struct" fi_op_fetch_atomic { ep, msg, fetch, flags }
        "struct" fi_op_compare_atomic { ep, msg, fetch, compare, flags }
        "struct" fi_op_cntr { cntr, value }
        "struct" fi_triggered_context { event_type, trigger }
        "struct" fi_triggered_context2 { event_type, trigger }
        "struct" fi_deferred_work { context, threshold, triggering_cntr, completion_cntr, op_type, op }
        "struct" fi_ops_av_set { size, set_union, intersect, diff, insert, remove, addr }
        "struct" fid_av_set { fid, ops }
        "struct" fi_collective_attr { op, datatype, datatype_attr, max_members, mode }
        "struct" fi_collective_addr { set, coll_addr }
        "struct" fi_msg_collective { msg_iov, desc, iov_count, coll_addr, root_addr, coll, datatype, op, context }
        "struct" fi_ops_collective { size, barrier, broadcast, alltoall, allreduce, allgather, reduce_scatter,
            reduce, scatter, gather, msg, barrier2 }
    }
}

/// The unions nested in C structs (anonymous there), by the member they fill.
fn nested_unions() -> Vec<(&'static str, &'static str, usize, usize)> {
    // (C struct, member, Rust size, Rust alignment)
    vec![
        (
            "fi_bus_attr",
            "attr",
            size_of::<fi_bus_attr_attr>(),
            align_of::<fi_bus_attr_attr>(),
        ),
        (
            "fi_mr_attr",
            "device",
            size_of::<fi_mr_attr_device>(),
            align_of::<fi_mr_attr_device>(),
        ),
        (
            "fi_trigger_var",
            "value",
            size_of::<fi_trigger_var_value>(),
            align_of::<fi_trigger_var_value>(),
        ),
        (
            "fi_trigger_xpu",
            "device",
            size_of::<fi_trigger_xpu_device>(),
            align_of::<fi_trigger_xpu_device>(),
        ),
        (
            "fi_triggered_context",
            "trigger",
            size_of::<fi_triggered_context_trigger>(),
            align_of::<fi_triggered_context_trigger>(),
        ),
        (
            "fi_triggered_context2",
            "trigger",
            size_of::<fi_triggered_context2_trigger>(),
            align_of::<fi_triggered_context2_trigger>(),
        ),
        (
            "fi_deferred_work",
            "op",
            size_of::<fi_deferred_work_op>(),
            align_of::<fi_deferred_work_op>(),
        ),
    ]
}

/// The C enum types, all `u32` aliases here.
const ENUMS: &[&str] = &[
    "fi_av_type",
    "fi_mr_mode",
    "fi_progress",
    "fi_threading",
    "fi_resource_mgmt",
    "fi_ep_type",
    "fi_bus_type",
    "fi_link_state",
    "fi_type",
    "fi_param_type",
    "fi_hmem_iface",
    "fi_datatype",
    "fi_op",
    "fi_collective_op",
    "fi_wait_obj",
    "fi_cq_format",
    "fi_cq_wait_cond",
    "fi_cntr_events",
    "fi_trigger_event",
    "fi_op_type",
    "fi_log_level",
    "fi_log_subsys",
];

macro_rules! consts {
    ($($path:ident :: $name:ident),* $(,)?) => {
        vec![$((stringify!($name), abi::$path::$name as i64)),*]
    };
}

/// Constants of the C-only enums, with their values here.
fn all_consts() -> Vec<(&'static str, i64)> {
    let mut v = consts![
        class::FI_CLASS_UNSPEC,
        class::FI_CLASS_FABRIC,
        class::FI_CLASS_DOMAIN,
        class::FI_CLASS_EP,
        class::FI_CLASS_SEP,
        class::FI_CLASS_RX_CTX,
        class::FI_CLASS_SRX_CTX,
        class::FI_CLASS_TX_CTX,
        class::FI_CLASS_STX_CTX,
        class::FI_CLASS_PEP,
        class::FI_CLASS_INTERFACE,
        class::FI_CLASS_AV,
        class::FI_CLASS_MR,
        class::FI_CLASS_EQ,
        class::FI_CLASS_CQ,
        class::FI_CLASS_CNTR,
        class::FI_CLASS_WAIT,
        class::FI_CLASS_POLL,
        class::FI_CLASS_CONNREQ,
        class::FI_CLASS_MC,
        class::FI_CLASS_NIC,
        class::FI_CLASS_AV_SET,
        class::FI_CLASS_MR_CACHE,
        class::FI_CLASS_MEM_MONITOR,
        class::FI_CLASS_PEER_CQ,
        class::FI_CLASS_PEER_SRX,
        class::FI_CLASS_LOG,
        class::FI_CLASS_PEER_AV,
        class::FI_CLASS_PEER_AV_SET,
        control::FI_GETFIDFLAG,
        control::FI_SETFIDFLAG,
        control::FI_GETOPSFLAG,
        control::FI_SETOPSFLAG,
        control::FI_ALIAS,
        control::FI_GETWAIT,
        control::FI_ENABLE,
        control::FI_BACKLOG,
        control::FI_GET_RAW_MR,
        control::FI_MAP_RAW_MR,
        control::FI_UNMAP_KEY,
        control::FI_QUEUE_WORK,
        control::FI_CANCEL_WORK,
        control::FI_FLUSH_WORK,
        control::FI_REFRESH,
        control::FI_DUP,
        control::FI_GETWAITOBJ,
        control::FI_GET_VAL,
        control::FI_SET_VAL,
        control::FI_EXPORT_FID,
        tostr_type::FI_TYPE_INFO,
        tostr_type::FI_TYPE_EP_TYPE,
        tostr_type::FI_TYPE_CAPS,
        tostr_type::FI_TYPE_OP_FLAGS,
        tostr_type::FI_TYPE_ADDR_FORMAT,
        tostr_type::FI_TYPE_TX_ATTR,
        tostr_type::FI_TYPE_RX_ATTR,
        tostr_type::FI_TYPE_EP_ATTR,
        tostr_type::FI_TYPE_DOMAIN_ATTR,
        tostr_type::FI_TYPE_FABRIC_ATTR,
        tostr_type::FI_TYPE_THREADING,
        tostr_type::FI_TYPE_PROGRESS,
        tostr_type::FI_TYPE_PROTOCOL,
        tostr_type::FI_TYPE_MSG_ORDER,
        tostr_type::FI_TYPE_MODE,
        tostr_type::FI_TYPE_AV_TYPE,
        tostr_type::FI_TYPE_ATOMIC_TYPE,
        tostr_type::FI_TYPE_ATOMIC_OP,
        tostr_type::FI_TYPE_VERSION,
        tostr_type::FI_TYPE_EQ_EVENT,
        tostr_type::FI_TYPE_CQ_EVENT_FLAGS,
        tostr_type::FI_TYPE_MR_MODE,
        tostr_type::FI_TYPE_OP_TYPE,
        tostr_type::FI_TYPE_FID,
        tostr_type::FI_TYPE_COLLECTIVE_OP,
        tostr_type::FI_TYPE_HMEM_IFACE,
        tostr_type::FI_TYPE_CQ_FORMAT,
        tostr_type::FI_TYPE_LOG_LEVEL,
        tostr_type::FI_TYPE_LOG_SUBSYS,
        param_type::FI_PARAM_STRING,
        param_type::FI_PARAM_INT,
        param_type::FI_PARAM_BOOL,
        param_type::FI_PARAM_SIZE_T,
        ep_opt::FI_OPT_ENDPOINT,
        ep_opt::FI_OPT_MIN_MULTI_RECV,
        ep_opt::FI_OPT_CM_DATA_SIZE,
        ep_opt::FI_OPT_BUFFERED_MIN,
        ep_opt::FI_OPT_BUFFERED_LIMIT,
        ep_opt::FI_OPT_SEND_BUF_SIZE,
        ep_opt::FI_OPT_RECV_BUF_SIZE,
        ep_opt::FI_OPT_TX_SIZE,
        ep_opt::FI_OPT_RX_SIZE,
        ep_opt::FI_OPT_FI_HMEM_P2P,
        ep_opt::FI_OPT_XPU_TRIGGER,
        op_type::FI_OP_RECV,
        op_type::FI_OP_SEND,
        op_type::FI_OP_TRECV,
        op_type::FI_OP_TSEND,
        op_type::FI_OP_READ,
        op_type::FI_OP_WRITE,
        op_type::FI_OP_ATOMIC,
        op_type::FI_OP_FETCH_ATOMIC,
        op_type::FI_OP_COMPARE_ATOMIC,
        op_type::FI_OP_CNTR_SET,
        op_type::FI_OP_CNTR_ADD,
        trigger_event::FI_TRIGGER_THRESHOLD,
        trigger_event::FI_TRIGGER_XPU,
        collective_op::FI_BARRIER,
        collective_op::FI_BROADCAST,
        collective_op::FI_ALLTOALL,
        collective_op::FI_ALLREDUCE,
        collective_op::FI_ALLGATHER,
        collective_op::FI_REDUCE_SCATTER,
        collective_op::FI_REDUCE,
        collective_op::FI_SCATTER,
        collective_op::FI_GATHER,
        hmem_iface::FI_HMEM_SYSTEM,
        hmem_iface::FI_HMEM_CUDA,
        hmem_iface::FI_HMEM_ROCR,
        hmem_iface::FI_HMEM_ZE,
        hmem_iface::FI_HMEM_NEURON,
        hmem_iface::FI_HMEM_SYNAPSEAI,
        cq_wait_cond::FI_CQ_COND_NONE,
        cq_wait_cond::FI_CQ_COND_THRESHOLD,
        log_level::FI_LOG_WARN,
        log_level::FI_LOG_TRACE,
        log_level::FI_LOG_INFO,
        log_level::FI_LOG_DEBUG,
        log_subsys::FI_LOG_CORE,
        log_subsys::FI_LOG_FABRIC,
        log_subsys::FI_LOG_DOMAIN,
        log_subsys::FI_LOG_EP_CTRL,
        log_subsys::FI_LOG_EP_DATA,
        log_subsys::FI_LOG_AV,
        log_subsys::FI_LOG_CQ,
        log_subsys::FI_LOG_EQ,
        log_subsys::FI_LOG_MR,
        log_subsys::FI_LOG_CNTR,
    ];
    v.extend([
        ("FI_PATH_MAX", abi::FI_PATH_MAX as i64),
        ("FI_NAME_MAX", abi::FI_NAME_MAX as i64),
        ("FI_VERSION_MAX", abi::FI_VERSION_MAX as i64),
        ("FI_SYNC_ERR", abi::FI_SYNC_ERR as i64),
        ("FI_PROV_SPECIFIC", i64::from(abi::FI_PROV_SPECIFIC)),
    ]);
    v
}

const HEADERS: &str = "#include <stddef.h>\n#include <stdio.h>\n#include <stdalign.h>\n\
#include <rdma/fabric.h>\n#include <rdma/fi_domain.h>\n#include <rdma/fi_endpoint.h>\n\
#include <rdma/fi_eq.h>\n#include <rdma/fi_cm.h>\n#include <rdma/fi_rma.h>\n#include <rdma/fi_tagged.h>\n\
#include <rdma/fi_atomic.h>\n#include <rdma/fi_trigger.h>\n#include <rdma/fi_collective.h>\n\
#include <rdma/providers/fi_prov.h>\n#include <rdma/providers/fi_log.h>\n";

/// A scratch directory for this test binary.
fn scratch(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

/// Compiles C source with gcc; extra args go last (libraries).
fn gcc(src: &Path, out: &Path, extra: &[&str]) {
    let r = Command::new("gcc")
        .args(["-std=gnu11", "-O1", "-Wall", "-o"])
        .arg(out)
        .arg(src)
        .args(extra)
        .output()
        .expect("gcc runs (install gcc)");
    assert!(
        r.status.success(),
        "gcc {} failed:\n{}",
        src.display(),
        String::from_utf8_lossy(&r.stderr)
    );
}

fn run(cmd: &mut Command) -> String {
    let r = cmd.output().expect("program runs");
    assert!(
        r.status.success(),
        "{:?} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        cmd,
        r.status,
        String::from_utf8_lossy(&r.stdout),
        String::from_utf8_lossy(&r.stderr)
    );
    String::from_utf8_lossy(&r.stdout).into_owned()
}

#[test]
fn every_struct_field_and_constant_matches_the_c_headers() {
    let layouts = all_layouts();
    let unions = nested_unions();
    let consts = all_consts();
    let mut c = String::from(HEADERS);
    c.push_str("#define M(s, f) sizeof(((s *) 0)->f)\nint main(void) {\n");
    let mut expected = Vec::new();
    for l in &layouts {
        let t = &l.c_type;
        let _ = writeln!(
            c,
            "printf(\"{t} size %zu align %zu\\n\", sizeof({t}), alignof({t}));"
        );
        expected.push(format!("{t} size {} align {}", l.size, l.align));
        for (f, off, sz) in &l.fields {
            // A flexible array member has no size in C; it has 0 here.
            let size = if *t == "struct fi_eq_cm_entry" && *f == "data" {
                "(size_t) 0".to_string()
            } else {
                format!("M({t}, {f})")
            };
            let _ = writeln!(
                c,
                "printf(\"{t}.{f} offset %zu size %zu\\n\", offsetof({t}, {f}), {size});"
            );
            expected.push(format!("{t}.{f} offset {off} size {sz}"));
        }
    }
    for (s, m, size, align) in &unions {
        let _ = writeln!(
            c,
            "printf(\"union in {s}.{m} size %zu align %zu\\n\", M(struct {s}, {m}), alignof(__typeof__(((struct {s} *) 0)->{m})));"
        );
        expected.push(format!("union in {s}.{m} size {size} align {align}"));
    }
    for e in ENUMS {
        let _ = writeln!(c, "printf(\"enum {e} size %zu\\n\", sizeof(enum {e}));");
        expected.push(format!("enum {e} size 4"));
    }
    for (n, v) in &consts {
        let _ = writeln!(c, "printf(\"const {n} %lld\\n\", (long long) {n});");
        expected.push(format!("const {n} {v}"));
    }
    c.push_str("return 0;\n}\n");
    let dir = scratch("layout");
    let src = dir.join("layout.c");
    std::fs::write(&src, &c).expect("write layout.c");
    let exe = dir.join("layout");
    gcc(&src, &exe, &[]);
    let out = run(&mut Command::new(&exe));
    let got: Vec<&str> = out.lines().collect();
    assert_eq!(got.len(), expected.len(), "line count of the C program");
    let mismatches: Vec<String> = got
        .iter()
        .zip(&expected)
        .filter(|(g, e)| *g != e)
        .map(|(g, e)| format!("C: {g}\n   Rust: {e}"))
        .collect();
    assert!(
        mismatches.is_empty(),
        "{} layout mismatches:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
    // Every field of every struct was checked (the list is not a sample).
    assert!(layouts.len() >= 99, "{} structs checked", layouts.len());
}

macro_rules! prefix {
    ($old:ident, $new:ident, $($f:ident),* $(,)?) => {{
        let mut bad = Vec::new();
        $(
            if offset_of!(compat::$old, $f) != offset_of!(abi::$new, $f) {
                bad.push(format!("{}.{}", stringify!($old), stringify!($f)));
            }
        )*
        assert!(size_of::<compat::$old>() <= size_of::<abi::$new>());
        bad
    }};
}

/// The old layouts of the FABRIC_1.0–1.2 entry points are prefixes of
/// today's (the compat entry points copy them as such).
#[test]
fn old_layouts_are_prefixes_of_the_current_ones() {
    let mut bad = Vec::new();
    bad.extend(prefix!(
        fi_tx_attr_1_0,
        fi_tx_attr,
        caps,
        mode,
        op_flags,
        msg_order,
        comp_order,
        inject_size,
        size,
        iov_limit,
        rma_iov_limit
    ));
    bad.extend(prefix!(
        fi_ep_attr_1_0,
        fi_ep_attr,
        r#type,
        protocol,
        protocol_version,
        max_msg_size,
        msg_prefix_size,
        max_order_raw_size,
        max_order_war_size,
        max_order_waw_size,
        mem_tag_format,
        tx_ctx_cnt,
        rx_ctx_cnt
    ));
    bad.extend(prefix!(
        fi_domain_attr_1_0,
        fi_domain_attr,
        domain,
        name,
        threading,
        control_progress,
        data_progress,
        resource_mgmt,
        av_type,
        mr_mode,
        mr_key_size,
        cq_data_size,
        cq_cnt,
        ep_cnt,
        tx_ctx_cnt,
        rx_ctx_cnt,
        max_ep_tx_ctx,
        max_ep_rx_ctx,
        max_ep_stx_ctx,
        max_ep_srx_ctx
    ));
    bad.extend(prefix!(
        fi_domain_attr_1_1,
        fi_domain_attr,
        domain,
        name,
        threading,
        control_progress,
        data_progress,
        resource_mgmt,
        av_type,
        mr_mode,
        mr_key_size,
        cq_data_size,
        cq_cnt,
        ep_cnt,
        tx_ctx_cnt,
        rx_ctx_cnt,
        max_ep_tx_ctx,
        max_ep_rx_ctx,
        max_ep_stx_ctx,
        max_ep_srx_ctx,
        cntr_cnt,
        mr_iov_limit,
        caps,
        mode,
        auth_key,
        auth_key_size,
        max_err_data,
        mr_cnt
    ));
    bad.extend(prefix!(
        fi_fabric_attr_1_0,
        fi_fabric_attr,
        fabric,
        name,
        prov_name,
        prov_version
    ));
    for old in [
        prefix!(
            fi_info_1_0,
            fi_info,
            next,
            caps,
            mode,
            addr_format,
            src_addrlen,
            dest_addrlen,
            src_addr,
            dest_addr,
            handle,
            tx_attr,
            rx_attr,
            ep_attr,
            domain_attr,
            fabric_attr
        ),
        prefix!(
            fi_info_1_1,
            fi_info,
            next,
            caps,
            mode,
            addr_format,
            src_addrlen,
            dest_addrlen,
            src_addr,
            dest_addr,
            handle,
            tx_attr,
            rx_attr,
            ep_attr,
            domain_attr,
            fabric_attr
        ),
        prefix!(
            fi_info_1_2,
            fi_info,
            next,
            caps,
            mode,
            addr_format,
            src_addrlen,
            dest_addrlen,
            src_addr,
            dest_addr,
            handle,
            tx_attr,
            rx_attr,
            ep_attr,
            domain_attr,
            fabric_attr,
            nic
        ),
    ] {
        bad.extend(old);
    }
    assert!(bad.is_empty(), "fields not at today's offsets: {bad:?}");
    // The 1.0 structures really are shorter: the entry points must not read past them.
    assert_eq!(size_of::<compat::fi_tx_attr_1_0>(), 72);
    assert_eq!(size_of::<compat::fi_ep_attr_1_0>(), 80);
    assert_eq!(size_of::<compat::fi_domain_attr_1_0>(), 120);
    assert_eq!(size_of::<compat::fi_domain_attr_1_1>(), 184);
    assert_eq!(size_of::<compat::fi_fabric_attr_1_0>(), 32);
    assert_eq!(size_of::<compat::fi_info_1_0>(), 112);
    assert_eq!(size_of::<compat::fi_info_1_2>(), size_of::<fi_info>());
}

/// The `libfabric.so` cargo built with this test (target/<profile>/deps,
/// beside the test executable; target/<profile> after a `cargo build`),
/// with a `libfabric.so.1` link to it in a directory of its own.
fn ofi_lib_dir() -> (PathBuf, PathBuf) {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("target/<profile>/deps/<test>");
    let so = [deps.join("libfabric.so"), deps.join("../libfabric.so")]
        .into_iter()
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("no libfabric.so in {} or its parent", deps.display()));
    let dir = scratch("ofi-lib");
    let link = dir.join("libfabric.so.1");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&so, &link).expect("symlink libfabric.so.1");
    (so, dir)
}

const DEBIAN_LIB: &str = "/usr/lib/x86_64-linux-gnu/libfabric.so.1";

/// `version name` (`@@` marks the default) of every `fi_*` symbol a library defines.
fn exported(lib: &Path) -> BTreeSet<String> {
    let out = run(Command::new("objdump").arg("-T").arg(lib));
    out.lines()
        .filter(|l| !l.contains("*UND*"))
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            let name = *cols.last()?;
            if !name.starts_with("fi_") {
                return None;
            }
            let ver = cols[cols.len() - 2];
            Some(if ver.starts_with('(') {
                format!("{} {name}", ver.trim_matches(|c| c == '(' || c == ')'))
            } else {
                format!("{ver}@@ {name}")
            })
        })
        .collect()
}

#[test]
fn soname_and_symbol_versions_equal_debians() {
    let (so, _) = ofi_lib_dir();
    let dynamic = run(Command::new("readelf").arg("-d").arg(&so));
    assert!(
        dynamic.contains("Library soname: [libfabric.so.1]"),
        "SONAME:\n{dynamic}"
    );
    let ours = exported(&so);
    let debian = exported(Path::new(DEBIAN_LIB));
    assert!(debian.len() >= 26, "Debian's list: {debian:?}");
    assert_eq!(ours, debian, "exported fi_* symbols and versions");
    // Nothing but fi_* symbols is exported.
    let all = run(Command::new("objdump").arg("-T").arg(&so));
    let others: Vec<&str> = all
        .lines()
        .filter(|l| l.contains(" g ") && !l.contains("*UND*"))
        .filter(|l| !l.split_whitespace().last().unwrap_or("").starts_with("fi_"))
        .collect();
    assert!(others.is_empty(), "other exported symbols: {others:?}");
}

/// Builds a C program from tests/c against the system headers, linked to `-lfabric` of `libdir`.
fn c_program(name: &str, libdir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/c")
        .join(format!("{name}.c"));
    let exe = scratch("c").join(name);
    let l = format!("-L{}", libdir.display());
    gcc(&src, &exe, &[&l, "-lfabric"]);
    exe
}

#[test]
fn top_level_entry_points_behave() {
    let (_, dir) = ofi_lib_dir();
    let exe = c_program("top", &dir);
    let r = Command::new(&exe)
        .env("LD_LIBRARY_PATH", &dir)
        .env_remove("FI_PROVIDER")
        .env("FI_LOG_LEVEL", "info")
        .env("FI_CAPITEST_KNOB", "-17")
        .env("FI_CAPITEST_FLAG", "yes")
        .env("FI_CAPITEST_LABEL", "hello")
        .env("FI_CAPITEST_BYTES", "0x40")
        .env("FI_CAPITEST_BADFLAG", "maybe")
        .output()
        .expect("run top");
    let out = String::from_utf8_lossy(&r.stdout);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(
        r.status.success() && out.contains("ALL OK"),
        "top.c:\n{out}\nstderr:\n{err}"
    );
    assert!(
        err.contains("capitest:ep_data:capi_func():77<warn> logged 7 seven 7.25 70000000000"),
        "fi_log output:\n{err}"
    );

    // fi_tostr of each offer equals what `ofi info -v` prints for it.
    let offers = ofi::getinfo(ofi_core::consts::FI_VERSION_CURRENT, None, None, 0, None)
        .expect("getinfo in Rust");
    let texts: Vec<&str> = out
        .split("== tostr ")
        .skip(1)
        .map(|b| {
            let b = &b[b.find('\n').map_or(0, |i| i + 1)..];
            &b[..b.find("== end").unwrap_or(b.len())]
        })
        .collect();
    assert_eq!(
        texts.len(),
        offers.len(),
        "offers seen from C and from Rust"
    );
    // shm's default addresses name the process (fi_shm://PID, alone or
    // inside a hybrid address): the two sides run in different processes.
    let no_pid = |t: &str| -> String {
        t.lines()
            .map(|l| match l.split_once("fi_shm://") {
                Some((head, rest)) => {
                    let tail = rest.trim_start_matches(|c: char| c.is_ascii_digit());
                    format!("{head}fi_shm://PID{tail}\n")
                }
                None => format!("{l}\n"),
            })
            .collect()
    };
    for (t, o) in texts.iter().zip(&offers) {
        assert_eq!(
            no_pid(t),
            no_pid(&format!("{o}")),
            "fi_tostr differs from `ofi info -v`"
        );
    }
}

/// Junk bytes, strings that are not addresses and several addresses in one
/// call on shm (FI_ADDR_STR) and tcp AVs: no crash, FI_ADDR_NOTAVAIL for
/// each malformed one, valid ones inserted and usable.
#[test]
fn av_insert_refuses_malformed_addresses() {
    let (_, dir) = ofi_lib_dir();
    let exe = c_program("av_insert", &dir);
    let r = Command::new(&exe)
        .env("LD_LIBRARY_PATH", &dir)
        .env_remove("FI_PROVIDER")
        .env("FI_LOG_LEVEL", "warn")
        .output()
        .expect("run av_insert");
    let out = String::from_utf8_lossy(&r.stdout);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(
        r.status.success() && out.contains("ALL OK"),
        "av_insert.c ({}):\n{out}\nstderr:\n{err}",
        r.status
    );
    // Each refusal is logged with its reason.
    assert!(
        err.contains("has no NUL within 256 bytes") && err.contains("no shm endpoint is named"),
        "no log line for the refused addresses:\n{err}"
    );
}

#[test]
fn tostr_prints_what_debians_libfabric_prints() {
    let (_, dir) = ofi_lib_dir();
    let exe = c_program("tostr", &dir);
    let ours = run(Command::new(&exe).env("LD_LIBRARY_PATH", &dir));
    let debian = run(Command::new(&exe).env_remove("LD_LIBRARY_PATH"));
    let (o, d): (Vec<&str>, Vec<&str>) = (ours.lines().collect(), debian.lines().collect());
    let diff: Vec<String> = o
        .iter()
        .zip(&d)
        .enumerate()
        .filter(|(_, (a, b))| a != b)
        .map(|(i, (a, b))| format!("line {}: ofi {a:?} / libfabric {b:?}", i + 1))
        .take(20)
        .collect();
    assert!(
        diff.is_empty() && o.len() == d.len(),
        "fi_tostr differences:\n{}",
        diff.join("\n")
    );
}
