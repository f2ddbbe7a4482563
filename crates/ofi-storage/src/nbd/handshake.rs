//! The server side of NBD's fixed newstyle handshake, sans-IO: bytes from
//! the client in, bytes to send and the outcome out. Serves one export
//! under any name (the volume the gateway forwards to), learnt only once
//! a client asks for it ([`Outcome::NeedExport`]: the gateway opens its
//! session with the target then, not for a client that idles), answers
//! NBD_OPT_INFO and NBD_OPT_GO with its size, transmission flags and block
//! size constraints, negotiates structured replies, and refuses what it
//! does not do (TLS, metadata contexts, extended headers) with
//! NBD_REP_ERR_UNSUP. A malformed option is answered with
//! NBD_REP_ERR_INVALID; only a broken magic or an absurd length ends the
//! connection.

use super::wire::{self, hs, opt, rep, tflag, NbdError, OptionHeader, OPTION_LEN};

/// Longest option data accepted (names and info requests are short).
pub const MAX_OPTION_LEN: u32 = 64 << 10;

/// What the client sees of the volume.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Export {
    /// Size in bytes.
    pub size: u64,
    /// Read-only.
    pub read_only: bool,
    /// FLUSH and FUA are honoured.
    pub flush: bool,
    /// TRIM is honoured.
    pub trim: bool,
    /// WRITE_ZEROES is honoured.
    pub zeroes: bool,
    /// Minimum block size (a request should be a multiple).
    pub min_block: u32,
    /// Preferred block size.
    pub preferred_block: u32,
    /// Largest READ or WRITE payload.
    pub max_payload: u32,
}

impl Export {
    /// The transmission flags announced.
    pub fn flags(&self) -> u16 {
        let mut f = tflag::HAS_FLAGS | tflag::CAN_MULTI_CONN;
        if self.read_only {
            f |= tflag::READ_ONLY;
        } else {
            if self.trim {
                f |= tflag::SEND_TRIM;
            }
            if self.zeroes {
                f |= tflag::SEND_WRITE_ZEROES;
            }
        }
        if self.flush {
            f |= tflag::SEND_FLUSH | tflag::SEND_FUA;
        }
        f
    }
}

/// What the handshake settled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Negotiated {
    /// Replies to reads are structured.
    pub structured: bool,
}

/// Where the handshake stands after some input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// More input is needed.
    Continue,
    /// Transmission starts (after the output is sent).
    Transmission(Negotiated),
    /// Close the connection after the output is sent (the client aborted,
    /// or broke the protocol: the reason says which).
    Close(String),
    /// The next option (NBD_OPT_EXPORT_NAME, INFO or GO) needs the export,
    /// not known yet: [`provide`](Handshake::provide) it, then call
    /// [`input`](Handshake::input) again with the bytes not consumed (the
    /// option's are not).
    NeedExport,
}

/// The handshake's state.
#[derive(Debug)]
pub struct Handshake {
    /// None until provided.
    export: Option<Result<Export, String>>,
    got_flags: bool,
    no_zeroes: bool,
    structured: bool,
    done: bool,
}

impl Handshake {
    /// A handshake offering `export`, or answering every request for it
    /// with NBD_REP_ERR_UNKNOWN and `Err`'s message (the volume cannot be
    /// reached now).
    pub fn new(export: Result<Export, String>) -> Self {
        let mut h = Handshake::deferred();
        h.export = Some(export);
        h
    }

    /// A handshake whose export is learnt when a client first needs it
    /// ([`Outcome::NeedExport`]).
    pub fn deferred() -> Self {
        Handshake {
            export: None,
            got_flags: false,
            no_zeroes: false,
            structured: false,
            done: false,
        }
    }

    /// The export (or why it cannot be reached) after
    /// [`Outcome::NeedExport`]; ignored once one was given.
    pub fn provide(&mut self, export: Result<Export, String>) {
        self.export.get_or_insert(export);
    }

    /// The greeting the server sends first.
    pub fn greeting() -> [u8; 18] {
        wire::greeting(hs::FIXED_NEWSTYLE | hs::NO_ZEROES)
    }

    /// Consumes what it can of `input`, appending replies to `out`; returns
    /// the bytes consumed and the outcome.
    pub fn input(&mut self, input: &[u8], out: &mut Vec<u8>) -> (usize, Outcome) {
        let mut used = 0;
        if self.done {
            return (0, Outcome::Close("handshake already over".into()));
        }
        if !self.got_flags {
            if input.len() < 4 {
                return (0, Outcome::Continue);
            }
            let f = u32::from_be_bytes([input[0], input[1], input[2], input[3]]);
            used = 4;
            if f & !(hs::C_FIXED_NEWSTYLE | hs::C_NO_ZEROES) != 0 {
                return (used, self.close(format!("unknown client flags {f:#x}")));
            }
            if f & hs::C_FIXED_NEWSTYLE == 0 {
                return (
                    used,
                    self.close("client does not speak fixed newstyle".into()),
                );
            }
            self.no_zeroes = f & hs::C_NO_ZEROES != 0;
            self.got_flags = true;
        }
        loop {
            let rest = &input[used..];
            let h = match OptionHeader::parse(rest) {
                Ok(h) => h,
                Err(NbdError::Truncated) => return (used, Outcome::Continue),
                Err(e) => return (used, self.close(format!("option: {e}"))),
            };
            if h.len > MAX_OPTION_LEN {
                return (
                    used,
                    self.close(format!("option {} of {} bytes", h.option, h.len)),
                );
            }
            let total = OPTION_LEN + h.len as usize;
            if rest.len() < total {
                return (used, Outcome::Continue);
            }
            let data = &rest[OPTION_LEN..total];
            if self.export.is_none() && needs_export(h.option, data) {
                return (used, Outcome::NeedExport);
            }
            used += total;
            if let Some(o) = self.option(h.option, data, out) {
                return (used, o);
            }
        }
    }

    fn close(&mut self, why: String) -> Outcome {
        self.done = true;
        Outcome::Close(why)
    }

    /// Handles one option; `Some` ends the handshake.
    fn option(&mut self, o: u32, data: &[u8], out: &mut Vec<u8>) -> Option<Outcome> {
        match o {
            opt::EXPORT_NAME => {
                let e = match &self.export {
                    Some(Ok(e)) => *e,
                    // No reply format exists here: the spec says close.
                    Some(Err(m)) => {
                        let why = format!("export unavailable: {m}");
                        return Some(self.close(why));
                    }
                    None => return Some(self.close("export not provided".into())),
                };
                out.extend_from_slice(&e.size.to_be_bytes());
                out.extend_from_slice(&e.flags().to_be_bytes());
                if !self.no_zeroes {
                    out.extend_from_slice(&[0u8; 124]);
                }
                self.done = true;
                // Structured replies need NBD_OPT_GO's reply path first;
                // with EXPORT_NAME they stay as negotiated before.
                Some(Outcome::Transmission(Negotiated {
                    structured: self.structured,
                }))
            }
            opt::ABORT => {
                wire::option_reply(out, o, rep::ACK, &[]);
                Some(self.close("client aborted the handshake".into()))
            }
            opt::LIST => {
                if !data.is_empty() {
                    wire::option_reply(out, o, rep::ERR_INVALID, b"LIST takes no data");
                    return None;
                }
                // One export; its name is empty (any name selects it).
                wire::option_reply(out, o, rep::SERVER, &0u32.to_be_bytes());
                wire::option_reply(out, o, rep::ACK, &[]);
                None
            }
            opt::STRUCTURED_REPLY => {
                if !data.is_empty() {
                    wire::option_reply(out, o, rep::ERR_INVALID, b"STRUCTURED_REPLY takes no data");
                } else {
                    self.structured = true;
                    wire::option_reply(out, o, rep::ACK, &[]);
                }
                None
            }
            opt::INFO | opt::GO => {
                if parse_info_request(data).is_none() {
                    wire::option_reply(out, o, rep::ERR_INVALID, b"malformed INFO/GO request");
                    return None;
                }
                let e = match &self.export {
                    Some(Ok(e)) => *e,
                    Some(Err(m)) => {
                        wire::option_reply(out, o, rep::ERR_UNKNOWN, m.as_bytes());
                        return None;
                    }
                    None => {
                        wire::option_reply(out, o, rep::ERR_UNKNOWN, b"export not provided");
                        return None;
                    }
                };
                wire::option_reply(out, o, rep::INFO, &wire::info_export(e.size, e.flags()));
                // The block sizes go whether asked for or not (the protocol
                // allows it): a client that did not ask would otherwise
                // assume transfers of up to 32 MiB, past the target's
                // largest (the gateway splits those, but a client that
                // knows the size sends requests that need no split).
                wire::option_reply(
                    out,
                    o,
                    rep::INFO,
                    &wire::info_block_size(e.min_block, e.preferred_block, e.max_payload),
                );
                wire::option_reply(out, o, rep::ACK, &[]);
                if o == opt::GO {
                    self.done = true;
                    return Some(Outcome::Transmission(Negotiated {
                        structured: self.structured,
                    }));
                }
                None
            }
            _ => {
                wire::option_reply(out, o, rep::ERR_UNSUP, &[]);
                None
            }
        }
    }
}

/// Whether option `o` with `data` is answered from the export (a
/// malformed INFO or GO is refused without it).
fn needs_export(o: u32, data: &[u8]) -> bool {
    match o {
        opt::EXPORT_NAME => true,
        opt::INFO | opt::GO => parse_info_request(data).is_some(),
        _ => false,
    }
}

/// INFO/GO data: name length, name, count of info requests, each a u16.
/// None if malformed (every info this server has is sent anyway).
fn parse_info_request(d: &[u8]) -> Option<()> {
    let nlen = u32::from_be_bytes(d.get(..4)?.try_into().ok()?) as usize;
    let rest = d.get(4..)?.get(nlen..)?;
    let n = u16::from_be_bytes(rest.get(..2)?.try_into().ok()?) as usize;
    let reqs = rest.get(2..)?;
    (reqs.len() == n * 2).then_some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn export() -> Export {
        Export {
            size: 1 << 20,
            read_only: false,
            flush: true,
            trim: true,
            zeroes: true,
            min_block: 1,
            preferred_block: 4096,
            max_payload: 1 << 20,
        }
    }

    fn option(o: u32, data: &[u8]) -> Vec<u8> {
        let mut v = OptionHeader {
            option: o,
            len: data.len() as u32,
        }
        .to_bytes()
        .to_vec();
        v.extend_from_slice(data);
        v
    }

    fn go_data(infos: &[u16]) -> Vec<u8> {
        let mut d = 3u32.to_be_bytes().to_vec();
        d.extend_from_slice(b"vol");
        d.extend_from_slice(&(infos.len() as u16).to_be_bytes());
        for i in infos {
            d.extend_from_slice(&i.to_be_bytes());
        }
        d
    }

    /// What a GO of `export()` is answered with: the export, its block
    /// sizes, ACK.
    fn go_reply(want: &mut Vec<u8>) {
        wire::option_reply(
            want,
            opt::GO,
            rep::INFO,
            &wire::info_export(1 << 20, export().flags()),
        );
        wire::option_reply(
            want,
            opt::GO,
            rep::INFO,
            &wire::info_block_size(1, 4096, 1 << 20),
        );
        wire::option_reply(want, opt::GO, rep::ACK, &[]);
    }

    #[test]
    fn go_with_structured_replies_and_block_sizes() {
        let mut h = Handshake::new(Ok(export()));
        let mut input = 3u32.to_be_bytes().to_vec();
        input.extend(option(opt::STRUCTURED_REPLY, &[]));
        input.extend(option(0x55, b"??"));
        input.extend(option(opt::GO, &go_data(&[wire::info::BLOCK_SIZE])));
        let mut out = Vec::new();
        // Byte by byte: the machine waits for whole options.
        let mut used = 0;
        let mut outcome = Outcome::Continue;
        for end in 1..=input.len() {
            let (n, o) = h.input(&input[used..end], &mut out);
            used += n;
            outcome = o;
            if outcome != Outcome::Continue {
                break;
            }
        }
        assert_eq!(used, input.len());
        assert_eq!(
            outcome,
            Outcome::Transmission(Negotiated { structured: true })
        );
        let mut want = Vec::new();
        wire::option_reply(&mut want, opt::STRUCTURED_REPLY, rep::ACK, &[]);
        wire::option_reply(&mut want, 0x55, rep::ERR_UNSUP, &[]);
        go_reply(&mut want);
        assert_eq!(out, want);
    }

    #[test]
    fn block_sizes_go_to_a_client_that_did_not_ask() {
        let mut h = Handshake::new(Ok(export()));
        let mut input = 3u32.to_be_bytes().to_vec();
        input.extend(option(opt::GO, &go_data(&[])));
        let mut out = Vec::new();
        let (_, o) = h.input(&input, &mut out);
        assert_eq!(o, Outcome::Transmission(Negotiated { structured: false }));
        let mut want = Vec::new();
        go_reply(&mut want);
        assert_eq!(out, want);
    }

    #[test]
    fn the_export_is_asked_for_only_when_a_client_selects_it() {
        let mut h = Handshake::deferred();
        let mut input = 3u32.to_be_bytes().to_vec();
        input.extend(option(opt::STRUCTURED_REPLY, &[]));
        input.extend(option(opt::LIST, &[]));
        // A malformed GO is refused without the export.
        input.extend(option(opt::GO, &[0, 0, 0, 9, 1]));
        let before = input.len();
        input.extend(option(opt::GO, &go_data(&[])));
        let mut out = Vec::new();
        let (n, o) = h.input(&input, &mut out);
        assert_eq!(o, Outcome::NeedExport);
        assert_eq!(n, before, "the GO is left for after the export");
        let mut want = Vec::new();
        wire::option_reply(&mut want, opt::STRUCTURED_REPLY, rep::ACK, &[]);
        wire::option_reply(&mut want, opt::LIST, rep::SERVER, &[0; 4]);
        wire::option_reply(&mut want, opt::LIST, rep::ACK, &[]);
        wire::option_reply(
            &mut want,
            opt::GO,
            rep::ERR_INVALID,
            b"malformed INFO/GO request",
        );
        assert_eq!(out, want);
        // Asked again without an answer: still needed, nothing consumed.
        assert_eq!(h.input(&input[n..], &mut out), (0, Outcome::NeedExport));
        h.provide(Ok(export()));
        out.clear();
        let (m, o) = h.input(&input[n..], &mut out);
        assert_eq!(m, input.len() - n);
        assert_eq!(o, Outcome::Transmission(Negotiated { structured: true }));
        want.clear();
        go_reply(&mut want);
        assert_eq!(out, want);
        // A target that cannot be reached: GO is refused, the client may
        // try again or abort, and is asked nothing more.
        let mut h = Handshake::deferred();
        let mut input = 1u32.to_be_bytes().to_vec();
        input.extend(option(opt::GO, &go_data(&[])));
        let (n, o) = h.input(&input, &mut out);
        assert_eq!((n, o), (4, Outcome::NeedExport));
        h.provide(Err("target down".into()));
        out.clear();
        let mut rest = input[n..].to_vec();
        rest.extend(option(opt::EXPORT_NAME, b""));
        let (_, o) = h.input(&rest, &mut out);
        assert!(matches!(o, Outcome::Close(_)), "{o:?}");
        want.clear();
        wire::option_reply(&mut want, opt::GO, rep::ERR_UNKNOWN, b"target down");
        assert_eq!(out, want);
    }

    #[test]
    fn unavailable_export_and_malformed_options() {
        let mut h = Handshake::new(Err("target down".into()));
        let mut input = 1u32.to_be_bytes().to_vec();
        input.extend(option(opt::GO, &go_data(&[])));
        input.extend(option(opt::INFO, &[0, 0, 0, 9, 1]));
        input.extend(option(opt::ABORT, &[]));
        let mut out = Vec::new();
        let (n, o) = h.input(&input, &mut out);
        assert_eq!(n, input.len());
        assert!(matches!(o, Outcome::Close(_)));
        let mut want = Vec::new();
        wire::option_reply(&mut want, opt::GO, rep::ERR_UNKNOWN, b"target down");
        wire::option_reply(
            &mut want,
            opt::INFO,
            rep::ERR_INVALID,
            b"malformed INFO/GO request",
        );
        wire::option_reply(&mut want, opt::ABORT, rep::ACK, &[]);
        assert_eq!(out, want);
    }

    #[test]
    fn export_name_old_style_and_bad_input() {
        let mut h = Handshake::new(Ok(export()));
        let mut input = 1u32.to_be_bytes().to_vec();
        input.extend(option(opt::EXPORT_NAME, b""));
        let mut out = Vec::new();
        let (_, o) = h.input(&input, &mut out);
        assert_eq!(o, Outcome::Transmission(Negotiated { structured: false }));
        assert_eq!(out.len(), 8 + 2 + 124);
        assert_eq!(&out[..8], &(1u64 << 20).to_be_bytes());

        let mut h = Handshake::new(Ok(export()));
        let (_, o) = h.input(&[0, 0, 0, 0x80], &mut out);
        assert!(matches!(o, Outcome::Close(_)));
        let mut h = Handshake::new(Ok(export()));
        let mut bad = 1u32.to_be_bytes().to_vec();
        bad.extend_from_slice(&[0u8; 16]);
        assert!(matches!(h.input(&bad, &mut out).1, Outcome::Close(_)));
    }
}
