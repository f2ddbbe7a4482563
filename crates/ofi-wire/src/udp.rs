//! The udp provider's datagrams. Every datagram starts with the same four
//! bytes (magic, version, kind, flags), so one check tells the provider's
//! datagrams from anything else that reaches its socket. All fields are
//! little-endian.
//!
//! Two families share that prefix:
//!
//! - **Packets** of the reliability layer (RDM endpoints), with a
//!   [`HDR_LEN`]-byte header ([`Packet`] / [`Repr`]):
//!
//! ```text
//!  0  magic u8 (0x75) | 1 version u8 (1) | 2 kind u8 | 3 flags u8
//!  4  window u32    bytes the sender can still take beyond `ack` (its receive window)
//!  8  session u64   the session the packet belongs to (0 on HELLO and REFUSE)
//! 16  seq u64       DATA: the packet's number; 0 otherwise
//! 24  ack u64       every packet numbered below `ack` arrived (in-session packets)
//! 32  sack u64      bit i set: packet `ack + 1 + i` arrived too
//! 40  payload
//! ```
//!
//! - **Datagrams** of DGRAM endpoints ([`Dgram`] / [`DgramRepr`]), a
//!   [`DGRAM_HDR_LEN`]-byte header and the message:
//!
//! ```text
//!  0  magic u8 (0x75) | 1 version u8 (1) | 2 kind u8 (DGRAM) | 3 flags u8
//!  4  reserved u32  must be 0
//!  8  tag u64       (flag TAGGED)
//! 16  data u64      remote CQ data (flag CQ_DATA)
//! 24  message [then a MAC_LEN-byte tag with flag MAC]
//! ```
//!
//! What each packet kind carries:
//!
//! | kind      | payload                 | session              | seq | ack, sack, window |
//! |-----------|-------------------------|----------------------|-----|-------------------|
//! | HELLO     | [`Handshake`] (no echo, no MAC) | 0            | 0   | 0                 |
//! | HELLO_ACK | [`Handshake`]           | the session it makes | 0   | 0                 |
//! | CONFIRM   | [`Handshake`]           | the session it makes | 0   | 0                 |
//! | DATA      | stream bytes (at least one) | session          | packet number | yes    |
//! | ACK       | none                    | session              | 0   | yes               |
//! | RESET     | none                    | the unknown session  | 0   | 0 (flag IDLE: `ack`) |
//! | REFUSE    | the refused nonce ([`NONCE_LEN`] bytes) | 0    | 0   | 0                 |
//!
//! The handshake is symmetric: a side that wants a session sends HELLO with
//! its endpoint's epoch and a fresh nonce; the other answers HELLO_ACK with
//! its epoch, its own fresh nonce, the first nonce echoed and (with an auth
//! key) a MAC; the first side checks it and answers CONFIRM (its nonce, the
//! other's echoed, its MAC). A session is named by [`session_id`] of the two
//! nonces; every later packet carries that name, so packets of an earlier
//! session or of a restarted peer are told apart. RESET answers an in-session
//! packet of a session the receiver does not know (it restarted), and a
//! closing endpoint sends it, flagged [`flag::CLOSED`], to every peer with a
//! live session; REFUSE answers a handshake whose auth key does not match.
//! A session idle for long ends by agreement: one side sends RESET flagged
//! [`flag::IDLE`] (its `ack` the number of the other's packets it has);
//! the other, idle too and having sent nothing beyond that, forgets the
//! session and answers a plain RESET (as to any session it does not know),
//! or refuses with an ACK flagged `IDLE`.

use crate::WireError;

/// Bytes of a packet header.
pub const HDR_LEN: usize = 40;
/// Bytes of a DGRAM header.
pub const DGRAM_HDR_LEN: usize = 24;
/// First byte of every datagram.
pub const MAGIC: u8 = 0x75;
/// Protocol version this module speaks.
pub const VERSION: u8 = 1;
/// Bytes of a handshake nonce.
pub const NONCE_LEN: usize = 32;
/// Bytes of a handshake MAC (HMAC-SHA256).
pub const HS_MAC_LEN: usize = 32;
/// Bytes of a DGRAM message's MAC (HMAC-SHA256, truncated).
pub const MAC_LEN: usize = 16;
/// Largest UDP payload (IPv4: 65535 minus the IP and UDP headers).
pub const MAX_DATAGRAM: usize = 65507;

/// Datagram kinds.
pub mod kind {
    /// A request for a session: epoch and nonce.
    pub const HELLO: u8 = 1;
    /// The answer to HELLO: epoch, nonce, the HELLO's nonce, MAC.
    pub const HELLO_ACK: u8 = 2;
    /// The answer to HELLO_ACK: epoch, nonce, the HELLO_ACK's nonce, MAC.
    pub const CONFIRM: u8 = 3;
    /// Stream bytes of a session.
    pub const DATA: u8 = 4;
    /// Acknowledgement (and window update) of a session.
    pub const ACK: u8 = 5;
    /// "I know no such session": the receiver restarted or forgot it.
    pub const RESET: u8 = 6;
    /// "Your handshake does not prove my auth key" (or, with
    /// [`flag::CLOSED`](super::flag::CLOSED), "this endpoint has closed").
    pub const REFUSE: u8 = 7;
    /// A DGRAM endpoint's message.
    pub const DGRAM: u8 = 8;
    /// Highest packet kind (DGRAM has its own header).
    pub const MAX_PACKET: u8 = 7;
}

/// Packet flag bits.
pub mod flag {
    /// In-session packets: answer with an ACK at once (probes).
    pub const ACK_NOW: u8 = 1;
    /// Handshake packets: the sender has an auth key (HELLO_ACK and
    /// CONFIRM then end with a MAC).
    pub const AUTH: u8 = 2;
    /// REFUSE: the endpoint the HELLO reached is closing (nothing listens
    /// there any more), not a key mismatch. RESET: the sender closes its
    /// endpoint (an orderly end), rather than not knowing the session.
    pub const CLOSED: u8 = 4;
    /// RESET: the sender asks to end the session, idle on its side (`ack`
    /// then says how many of the receiver's packets it has: every one, if
    /// the session is idle both ways); a plain RESET agrees. ACK: the
    /// sender refuses to end the session (it still uses it).
    pub const IDLE: u8 = 8;
    /// Every packet flag.
    pub const ALL: u8 = ACK_NOW | AUTH | CLOSED | IDLE;
}

/// DGRAM flag bits.
pub mod dflag {
    /// The message is tagged (`tag` is meaningful).
    pub const TAGGED: u8 = 1;
    /// `data` carries remote CQ data.
    pub const CQ_DATA: u8 = 2;
    /// The message ends with a [`MAC_LEN`](super::MAC_LEN)-byte MAC
    /// (the sender has an auth key).
    pub const MAC: u8 = 4;
    /// Every DGRAM flag.
    pub const ALL: u8 = TAGGED | CQ_DATA | MAC;
}

mod field {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 1;
    pub const KIND: usize = 2;
    pub const FLAGS: usize = 3;
    pub const WINDOW: usize = 4;
    pub const SESSION: usize = 8;
    pub const SEQ: usize = 16;
    pub const ACK: usize = 24;
    pub const SACK: usize = 32;
    // DGRAM
    pub const RESERVED: usize = 4;
    pub const TAG: usize = 8;
    pub const DATA: usize = 16;
}

#[inline]
fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

#[inline]
fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// The kind of a datagram (its third byte) after checking magic and
/// version; what a receiver dispatches on.
pub fn peek_kind(b: &[u8]) -> Result<u8, WireError> {
    if b.len() < 4 {
        return Err(WireError::Truncated);
    }
    if b[field::MAGIC] != MAGIC {
        return Err(WireError::Malformed("bad magic"));
    }
    if b[field::VERSION] != VERSION {
        return Err(WireError::Malformed("unsupported version"));
    }
    Ok(b[field::KIND])
}

/// A checked view of a packet (header and payload).
#[derive(Debug, Clone, Copy)]
pub struct Packet<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checks (setters on a fresh buffer).
    pub const fn new_unchecked(buf: T) -> Self {
        Packet { buf }
    }
    /// Wraps a buffer after checking it holds a whole header.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let p = Packet { buf };
        p.check_len()?;
        Ok(p)
    }
    /// Checks the buffer is long enough for every accessor.
    pub fn check_len(&self) -> Result<(), WireError> {
        if self.buf.as_ref().len() < HDR_LEN {
            return Err(WireError::Truncated);
        }
        Ok(())
    }
    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buf
    }
    /// Magic byte.
    pub fn magic(&self) -> u8 {
        self.buf.as_ref()[field::MAGIC]
    }
    /// Version.
    pub fn version(&self) -> u8 {
        self.buf.as_ref()[field::VERSION]
    }
    /// Kind.
    pub fn kind(&self) -> u8 {
        self.buf.as_ref()[field::KIND]
    }
    /// Flags.
    pub fn flags(&self) -> u8 {
        self.buf.as_ref()[field::FLAGS]
    }
    /// The sender's receive window (bytes beyond `ack`).
    pub fn window(&self) -> u32 {
        u32_at(self.buf.as_ref(), field::WINDOW)
    }
    /// Session name.
    pub fn session(&self) -> u64 {
        u64_at(self.buf.as_ref(), field::SESSION)
    }
    /// Packet number (DATA).
    pub fn seq(&self) -> u64 {
        u64_at(self.buf.as_ref(), field::SEQ)
    }
    /// Cumulative acknowledgement: every packet below it arrived.
    pub fn ack(&self) -> u64 {
        u64_at(self.buf.as_ref(), field::ACK)
    }
    /// Selective acknowledgements: bit i for packet `ack + 1 + i`.
    pub fn sack(&self) -> u64 {
        u64_at(self.buf.as_ref(), field::SACK)
    }
    /// The payload.
    pub fn payload(&self) -> &[u8] {
        &self.buf.as_ref()[HDR_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn put_u32(&mut self, at: usize, v: u32) {
        self.buf.as_mut()[at..at + 4].copy_from_slice(&v.to_le_bytes());
    }
    fn put_u64(&mut self, at: usize, v: u64) {
        self.buf.as_mut()[at..at + 8].copy_from_slice(&v.to_le_bytes());
    }
    /// Sets magic and version.
    pub fn set_prefix(&mut self) {
        self.buf.as_mut()[field::MAGIC] = MAGIC;
        self.buf.as_mut()[field::VERSION] = VERSION;
    }
    /// Sets the kind.
    pub fn set_kind(&mut self, v: u8) {
        self.buf.as_mut()[field::KIND] = v;
    }
    /// Sets the flags.
    pub fn set_flags(&mut self, v: u8) {
        self.buf.as_mut()[field::FLAGS] = v;
    }
    /// Sets the window.
    pub fn set_window(&mut self, v: u32) {
        self.put_u32(field::WINDOW, v)
    }
    /// Sets the session.
    pub fn set_session(&mut self, v: u64) {
        self.put_u64(field::SESSION, v)
    }
    /// Sets the packet number.
    pub fn set_seq(&mut self, v: u64) {
        self.put_u64(field::SEQ, v)
    }
    /// Sets the cumulative acknowledgement.
    pub fn set_ack(&mut self, v: u64) {
        self.put_u64(field::ACK, v)
    }
    /// Sets the selective acknowledgements.
    pub fn set_sack(&mut self, v: u64) {
        self.put_u64(field::SACK, v)
    }
    /// Mutable payload.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buf.as_mut()[HDR_LEN..]
    }
}

/// A parsed, validated packet header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Repr {
    /// Kind ([`kind`]).
    pub kind: u8,
    /// Flags ([`flag`]).
    pub flags: u8,
    /// The sender's receive window.
    pub window: u32,
    /// Session name.
    pub session: u64,
    /// Packet number (DATA).
    pub seq: u64,
    /// Cumulative acknowledgement.
    pub ack: u64,
    /// Selective acknowledgements.
    pub sack: u64,
}

impl Repr {
    /// Parses and validates a packet (its header against the payload the
    /// buffer holds).
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr, WireError> {
        let b = p.buf.as_ref();
        // One fixed-size view of the header: the field reads below need
        // no bounds checks.
        let h: &[u8; HDR_LEN] = match b.get(..HDR_LEN) {
            Some(h) => h.try_into().map_err(|_| WireError::Truncated)?,
            None => return Err(WireError::Truncated),
        };
        peek_kind(h)?;
        let r = Repr {
            kind: h[field::KIND],
            flags: h[field::FLAGS],
            window: u32_at(h, field::WINDOW),
            session: u64_at(h, field::SESSION),
            seq: u64_at(h, field::SEQ),
            ack: u64_at(h, field::ACK),
            sack: u64_at(h, field::SACK),
        };
        if r.kind == 0 || r.kind > kind::MAX_PACKET {
            return Err(WireError::UnknownOp(r.kind));
        }
        if r.flags & !flag::ALL != 0 {
            return Err(WireError::Malformed("unknown flag bits"));
        }
        let handshake = matches!(r.kind, kind::HELLO | kind::HELLO_ACK | kind::CONFIRM);
        let in_session = matches!(r.kind, kind::DATA | kind::ACK);
        if r.flags & flag::AUTH != 0 && !handshake {
            return Err(WireError::Malformed("AUTH flag outside the handshake"));
        }
        if r.flags & flag::ACK_NOW != 0 && !in_session {
            return Err(WireError::Malformed("ACK_NOW flag outside a session"));
        }
        if r.flags & flag::IDLE != 0 {
            check_idle(&r)?;
        }
        if !in_session
            && (r.window != 0
                || r.sack != 0
                || (r.ack != 0 && (r.kind != kind::RESET || r.flags & flag::IDLE == 0)))
        {
            return Err(WireError::Malformed(
                "acknowledgement fields outside a session",
            ));
        }
        if r.kind != kind::DATA && r.seq != 0 {
            return Err(WireError::Malformed(
                "packet number on a packet that takes none",
            ));
        }
        let session_zero = matches!(r.kind, kind::HELLO | kind::REFUSE);
        if session_zero != (r.session == 0) {
            return Err(WireError::Malformed(
                "session name where none belongs, or none",
            ));
        }
        if in_session && r.seq.max(r.ack) > MAX_SEQ {
            return Err(WireError::Malformed("packet number out of range"));
        }
        let len = p.payload().len();
        let ok = match r.kind {
            kind::HELLO => len == HS_LEN,
            kind::HELLO_ACK | kind::CONFIRM => {
                len == HS_LEN
                    + if r.flags & flag::AUTH != 0 {
                        HS_MAC_LEN
                    } else {
                        0
                    }
            }
            kind::DATA => len > 0,
            kind::REFUSE => len == NONCE_LEN,
            _ => len == 0,
        };
        if !ok {
            return Err(WireError::Malformed("payload length wrong for the kind"));
        }
        Ok(r)
    }
    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_prefix();
        p.set_kind(self.kind);
        p.set_flags(self.flags);
        p.set_window(self.window);
        p.set_session(self.session);
        p.set_seq(self.seq);
        p.set_ack(self.ack);
        p.set_sack(self.sack);
    }
    /// The header as bytes.
    pub fn to_bytes(&self) -> [u8; HDR_LEN] {
        let mut b = [0u8; HDR_LEN];
        self.write(&mut b);
        b
    }
    /// Writes the header into `h` (as [`emit`](Self::emit) does, with no
    /// length to check).
    #[inline]
    pub fn write(&self, h: &mut [u8; HDR_LEN]) {
        h[field::MAGIC] = MAGIC;
        h[field::VERSION] = VERSION;
        h[field::KIND] = self.kind;
        h[field::FLAGS] = self.flags;
        h[field::WINDOW..field::WINDOW + 4].copy_from_slice(&self.window.to_le_bytes());
        h[field::SESSION..field::SESSION + 8].copy_from_slice(&self.session.to_le_bytes());
        h[field::SEQ..field::SEQ + 8].copy_from_slice(&self.seq.to_le_bytes());
        h[field::ACK..field::ACK + 8].copy_from_slice(&self.ack.to_le_bytes());
        h[field::SACK..field::SACK + 8].copy_from_slice(&self.sack.to_le_bytes());
    }
}

/// The rules of flag IDLE: on RESET (with an `ack` in range, never with
/// CLOSED) and ACK only.
#[cold]
fn check_idle(r: &Repr) -> Result<(), WireError> {
    match r.kind {
        kind::ACK => Ok(()),
        kind::RESET if r.flags & flag::CLOSED != 0 => {
            Err(WireError::Malformed("IDLE and CLOSED together"))
        }
        kind::RESET if r.ack > MAX_SEQ => Err(WireError::Malformed("packet number out of range")),
        kind::RESET => Ok(()),
        _ => Err(WireError::Malformed(
            "IDLE flag on a packet that takes none",
        )),
    }
}

/// Largest packet number (and acknowledgement) accepted: far beyond what a
/// session sends, and far from overflowing when windows are added to it.
pub const MAX_SEQ: u64 = 1 << 62;

/// Bytes of a handshake payload without its MAC.
pub const HS_LEN: usize = 80;

mod hs_field {
    pub const EPOCH: usize = 0;
    pub const MAX_DGRAM: usize = 8;
    pub const WINDOW: usize = 12;
    pub const NONCE: usize = 16;
    pub const ECHO: usize = 48;
    pub const MAC: usize = 80;
}

/// The payload of HELLO, HELLO_ACK and CONFIRM:
///
/// ```text
///  0  epoch u64          the sender endpoint's epoch (random per endpoint)
///  8  max_datagram u32   largest datagram the sender accepts
/// 12  window u32         the sender's receive window (bytes)
/// 16  nonce [32]         the sender's nonce for this handshake
/// 48  echo [32]          the nonce it answers (zeros in HELLO)
/// 80  mac [32]           HELLO_ACK and CONFIRM with flag AUTH
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handshake {
    /// The sender endpoint's epoch.
    pub epoch: u64,
    /// Largest datagram the sender accepts.
    pub max_datagram: u32,
    /// The sender's receive window, in bytes.
    pub window: u32,
    /// The sender's nonce.
    pub nonce: [u8; NONCE_LEN],
    /// The nonce answered (zeros in HELLO).
    pub echo: [u8; NONCE_LEN],
    /// The MAC (HELLO_ACK and CONFIRM with flag AUTH).
    pub mac: Option<[u8; HS_MAC_LEN]>,
}

impl Handshake {
    /// Parses a handshake payload of a packet whose header parsed as `r`.
    pub fn parse(r: &Repr, payload: &[u8]) -> Result<Handshake, WireError> {
        if !matches!(r.kind, kind::HELLO | kind::HELLO_ACK | kind::CONFIRM) {
            return Err(WireError::Malformed("not a handshake packet"));
        }
        let with_mac = r.kind != kind::HELLO && r.flags & flag::AUTH != 0;
        let want = HS_LEN + if with_mac { HS_MAC_LEN } else { 0 };
        if payload.len() != want {
            return Err(WireError::Truncated);
        }
        let mut nonce = [0u8; NONCE_LEN];
        nonce.copy_from_slice(&payload[hs_field::NONCE..hs_field::NONCE + NONCE_LEN]);
        let mut echo = [0u8; NONCE_LEN];
        echo.copy_from_slice(&payload[hs_field::ECHO..hs_field::ECHO + NONCE_LEN]);
        if r.kind == kind::HELLO && echo != [0; NONCE_LEN] {
            return Err(WireError::Malformed("HELLO echoes a nonce"));
        }
        let mac = with_mac.then(|| {
            let mut m = [0u8; HS_MAC_LEN];
            m.copy_from_slice(&payload[hs_field::MAC..hs_field::MAC + HS_MAC_LEN]);
            m
        });
        let max_datagram = u32_at(payload, hs_field::MAX_DGRAM);
        if (max_datagram as usize) < HDR_LEN + 1 {
            return Err(WireError::Malformed(
                "largest datagram below one byte of data",
            ));
        }
        Ok(Handshake {
            epoch: u64_at(payload, hs_field::EPOCH),
            max_datagram,
            window: u32_at(payload, hs_field::WINDOW),
            nonce,
            echo,
            mac,
        })
    }
    /// Appends the payload to `out`.
    pub fn emit(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.resize(start + HS_LEN, 0);
        let b = &mut out[start..];
        b[hs_field::EPOCH..hs_field::EPOCH + 8].copy_from_slice(&self.epoch.to_le_bytes());
        b[hs_field::MAX_DGRAM..hs_field::MAX_DGRAM + 4]
            .copy_from_slice(&self.max_datagram.to_le_bytes());
        b[hs_field::WINDOW..hs_field::WINDOW + 4].copy_from_slice(&self.window.to_le_bytes());
        b[hs_field::NONCE..hs_field::NONCE + NONCE_LEN].copy_from_slice(&self.nonce);
        b[hs_field::ECHO..hs_field::ECHO + NONCE_LEN].copy_from_slice(&self.echo);
        if let Some(m) = &self.mac {
            out.extend_from_slice(m);
        }
    }
}

/// The name of the session two nonces make: the same whichever side
/// computes it (the XOR of their first eight bytes), never 0.
pub fn session_id(a: &[u8; NONCE_LEN], b: &[u8; NONCE_LEN]) -> u64 {
    let x = u64_at(a, 0) ^ u64_at(b, 0);
    if x == 0 {
        1
    } else {
        x
    }
}

/// A checked view of a DGRAM endpoint's datagram.
#[derive(Debug, Clone, Copy)]
pub struct Dgram<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> Dgram<T> {
    /// Wraps a buffer without checks.
    pub const fn new_unchecked(buf: T) -> Self {
        Dgram { buf }
    }
    /// Wraps a buffer after checking it holds a whole header.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let d = Dgram { buf };
        d.check_len()?;
        Ok(d)
    }
    /// Checks the buffer is long enough for every accessor.
    pub fn check_len(&self) -> Result<(), WireError> {
        if self.buf.as_ref().len() < DGRAM_HDR_LEN {
            return Err(WireError::Truncated);
        }
        Ok(())
    }
    /// Flags.
    pub fn flags(&self) -> u8 {
        self.buf.as_ref()[field::FLAGS]
    }
    /// Reserved word.
    pub fn reserved(&self) -> u32 {
        u32_at(self.buf.as_ref(), field::RESERVED)
    }
    /// Tag.
    pub fn tag(&self) -> u64 {
        u64_at(self.buf.as_ref(), field::TAG)
    }
    /// Remote CQ data.
    pub fn data(&self) -> u64 {
        u64_at(self.buf.as_ref(), field::DATA)
    }
    /// Everything after the header (message and MAC, if any).
    pub fn body(&self) -> &[u8] {
        &self.buf.as_ref()[DGRAM_HDR_LEN..]
    }
}

/// A parsed, validated DGRAM header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DgramRepr {
    /// Flags ([`dflag`]).
    pub flags: u8,
    /// Tag (0 unless TAGGED).
    pub tag: u64,
    /// Remote CQ data (0 unless CQ_DATA).
    pub data: u64,
    /// Bytes of the message (the body less a MAC).
    pub len: usize,
}

impl DgramRepr {
    /// Parses and validates a DGRAM datagram.
    pub fn parse<T: AsRef<[u8]>>(d: &Dgram<T>) -> Result<DgramRepr, WireError> {
        d.check_len()?;
        if peek_kind(d.buf.as_ref())? != kind::DGRAM {
            return Err(WireError::Malformed("not a DGRAM datagram"));
        }
        let flags = d.flags();
        if flags & !dflag::ALL != 0 {
            return Err(WireError::Malformed("unknown flag bits"));
        }
        if d.reserved() != 0 {
            return Err(WireError::Malformed("nonzero reserved field"));
        }
        let (tag, data) = (d.tag(), d.data());
        if flags & dflag::TAGGED == 0 && tag != 0 {
            return Err(WireError::Malformed("tag on an untagged message"));
        }
        if flags & dflag::CQ_DATA == 0 && data != 0 {
            return Err(WireError::Malformed("data without CQ_DATA"));
        }
        let body = d.body().len();
        let mac = if flags & dflag::MAC != 0 { MAC_LEN } else { 0 };
        let len = body.checked_sub(mac).ok_or(WireError::Truncated)?;
        Ok(DgramRepr {
            flags,
            tag,
            data,
            len,
        })
    }
    /// The header as bytes.
    pub fn to_bytes(&self) -> [u8; DGRAM_HDR_LEN] {
        let mut b = [0u8; DGRAM_HDR_LEN];
        b[field::MAGIC] = MAGIC;
        b[field::VERSION] = VERSION;
        b[field::KIND] = kind::DGRAM;
        b[field::FLAGS] = self.flags;
        b[field::TAG..field::TAG + 8].copy_from_slice(&self.tag.to_le_bytes());
        b[field::DATA..field::DATA + 8].copy_from_slice(&self.data.to_le_bytes());
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[rustfmt::skip]
    static GOLDEN_DATA: [u8; 44] = [
        0x75, 0x01, 0x04, 0x01, // magic, v1, DATA, ACK_NOW
        0x00, 0x00, 0x10, 0x00, // window 1 MiB
        0xef, 0xbe, 0xad, 0xde, 0x00, 0x00, 0x00, 0x00, // session 0xdeadbeef
        0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // seq 7
        0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // ack 5
        0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // sack: 6 and 8 arrived
        b'p', b'i', b'n', b'g',
    ];

    fn golden_data() -> Repr {
        Repr {
            kind: kind::DATA,
            flags: flag::ACK_NOW,
            window: 1 << 20,
            session: 0xdead_beef,
            seq: 7,
            ack: 5,
            sack: 0b101,
        }
    }

    #[rustfmt::skip]
    static GOLDEN_DGRAM: [u8; 29] = [
        0x75, 0x01, 0x08, 0x03, // magic, v1, DGRAM, TAGGED|CQ_DATA
        0x00, 0x00, 0x00, 0x00, // reserved
        0x2a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // tag 42
        0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // data 9
        b'h', b'e', b'l', b'l', b'o',
    ];

    fn hs(kind: u8, auth: bool) -> (Repr, Handshake) {
        let r = Repr {
            kind,
            flags: if auth { flag::AUTH } else { 0 },
            session: if kind == self::kind::HELLO { 0 } else { 77 },
            ..Default::default()
        };
        let h = Handshake {
            epoch: 0x0102_0304_0506_0708,
            max_datagram: 65507,
            window: 0x0040_0000,
            nonce: [0x11; NONCE_LEN],
            echo: if kind == self::kind::HELLO {
                [0; NONCE_LEN]
            } else {
                [0x22; NONCE_LEN]
            },
            mac: (auth && kind != self::kind::HELLO).then_some([0x33; HS_MAC_LEN]),
        };
        (r, h)
    }

    #[test]
    fn test_deconstruct() {
        let p = Packet::new_checked(&GOLDEN_DATA[..]).unwrap();
        assert_eq!(Repr::parse(&p).unwrap(), golden_data());
        assert_eq!(p.payload(), b"ping");
        let d = Dgram::new_checked(&GOLDEN_DGRAM[..]).unwrap();
        let r = DgramRepr::parse(&d).unwrap();
        assert_eq!(
            r,
            DgramRepr {
                flags: dflag::TAGGED | dflag::CQ_DATA,
                tag: 42,
                data: 9,
                len: 5
            }
        );
        assert_eq!(&d.body()[..r.len], b"hello");
    }

    #[test]
    fn test_construct() {
        assert_eq!(golden_data().to_bytes()[..], GOLDEN_DATA[..HDR_LEN]);
        let d = DgramRepr {
            flags: dflag::TAGGED | dflag::CQ_DATA,
            tag: 42,
            data: 9,
            len: 5,
        };
        assert_eq!(d.to_bytes()[..], GOLDEN_DGRAM[..DGRAM_HDR_LEN]);
    }

    #[test]
    fn test_handshake_roundtrip_and_golden_prefix() {
        for k in [kind::HELLO, kind::HELLO_ACK, kind::CONFIRM] {
            for auth in [false, true] {
                let (r, h) = hs(k, auth);
                let mut buf = r.to_bytes().to_vec();
                h.emit(&mut buf);
                let p = Packet::new_checked(&buf[..]).unwrap();
                let r2 = Repr::parse(&p).unwrap();
                assert_eq!(r2, r);
                assert_eq!(Handshake::parse(&r2, p.payload()).unwrap(), h);
            }
        }
        let (r, h) = hs(kind::HELLO, false);
        let mut buf = r.to_bytes().to_vec();
        h.emit(&mut buf);
        // epoch, the largest datagram 65507 (0xffe3), the window 4 MiB,
        // then the nonce.
        assert_eq!(
            buf[HDR_LEN..HDR_LEN + 20],
            [8, 7, 6, 5, 4, 3, 2, 1, 0xe3, 0xff, 0, 0, 0, 0, 0x40, 0, 0x11, 0x11, 0x11, 0x11]
        );
    }

    #[test]
    fn test_truncated() {
        for n in 0..HDR_LEN {
            assert_eq!(
                Packet::new_checked(&GOLDEN_DATA[..n]).unwrap_err(),
                WireError::Truncated
            );
        }
        // A DATA packet without payload is not a DATA packet.
        let p = Packet::new_checked(&GOLDEN_DATA[..HDR_LEN]).unwrap();
        assert!(Repr::parse(&p).is_err());
        for n in 0..DGRAM_HDR_LEN {
            assert!(DgramRepr::parse(&Dgram::new_unchecked(&GOLDEN_DGRAM[..n])).is_err());
        }
        // A MAC flag on a body shorter than a MAC.
        let mut b = GOLDEN_DGRAM;
        b[3] |= dflag::MAC;
        assert_eq!(
            DgramRepr::parse(&Dgram::new_unchecked(&b[..])).unwrap_err(),
            WireError::Truncated
        );
        let (r, h) = hs(kind::HELLO_ACK, true);
        let mut buf = r.to_bytes().to_vec();
        h.emit(&mut buf);
        buf.pop();
        assert!(Repr::parse(&Packet::new_unchecked(&buf[..])).is_err());
    }

    #[test]
    fn test_rejects_malformed() {
        let bad = |f: &dyn Fn(&mut [u8; 44])| {
            let mut b = GOLDEN_DATA;
            f(&mut b);
            Repr::parse(&Packet::new_unchecked(&b[..])).is_err()
        };
        assert!(bad(&|b| b[0] = 0x6f));
        assert!(bad(&|b| b[1] = 2));
        assert!(bad(&|b| b[2] = 0));
        assert!(bad(&|b| b[2] = kind::DGRAM));
        assert!(bad(&|b| b[3] = 0x80));
        assert!(bad(&|b| b[3] = flag::AUTH));
        assert!(bad(&|b| b[8..16].fill(0))); // DATA without a session
        assert!(bad(&|b| b[16..24].copy_from_slice(&u64::MAX.to_le_bytes())));
        // An ACK carries no packet number and no payload.
        let mut ack = golden_data();
        ack.kind = kind::ACK;
        assert!(Repr::parse(&Packet::new_unchecked(&ack.to_bytes()[..])).is_err());
        ack.seq = 0;
        ack.flags = 0;
        assert!(Repr::parse(&Packet::new_unchecked(&ack.to_bytes()[..])).is_ok());
        // IDLE: on RESET (with an `ack`) and ACK only, never with CLOSED.
        let ask = Repr {
            kind: kind::RESET,
            flags: flag::IDLE,
            session: 9,
            ack: 77,
            ..Default::default()
        };
        assert_eq!(
            Repr::parse(&Packet::new_unchecked(&ask.to_bytes()[..])),
            Ok(ask)
        );
        for m in [
            Repr {
                flags: flag::IDLE | flag::CLOSED,
                ..ask
            },
            Repr { window: 1, ..ask },
            Repr { sack: 1, ..ask },
            Repr { flags: 0, ..ask },
            Repr {
                kind: kind::DATA,
                ..ask
            },
        ] {
            assert!(
                Repr::parse(&Packet::new_unchecked(&m.to_bytes()[..])).is_err(),
                "{m:?}"
            );
        }
        let refuse = Repr {
            kind: kind::ACK,
            flags: flag::IDLE,
            window: 5,
            session: 9,
            ack: 3,
            ..Default::default()
        };
        assert_eq!(
            Repr::parse(&Packet::new_unchecked(&refuse.to_bytes()[..])),
            Ok(refuse)
        );
        // HELLO with acknowledgement fields or a session.
        let (r, h) = hs(kind::HELLO, false);
        for m in [
            Repr { window: 1, ..r },
            Repr { session: 5, ..r },
            Repr {
                flags: flag::ACK_NOW,
                ..r
            },
        ] {
            let mut buf = m.to_bytes().to_vec();
            h.emit(&mut buf);
            assert!(
                Repr::parse(&Packet::new_unchecked(&buf[..])).is_err(),
                "{m:?}"
            );
        }
        // A HELLO echoing a nonce.
        let mut buf = r.to_bytes().to_vec();
        Handshake {
            echo: [1; NONCE_LEN],
            ..h
        }
        .emit(&mut buf);
        let p = Packet::new_unchecked(&buf[..]);
        assert!(Handshake::parse(&Repr::parse(&p).unwrap(), p.payload()).is_err());
        // DGRAM: reserved word, stray tag, stray data.
        for at in [4usize, 8, 16] {
            let mut b = GOLDEN_DGRAM;
            b[3] = 0;
            b[at] = 1;
            assert!(DgramRepr::parse(&Dgram::new_unchecked(&b[..])).is_err());
        }
    }

    #[test]
    fn session_names_are_symmetric_and_never_zero() {
        let a = [7u8; NONCE_LEN];
        let b = [9u8; NONCE_LEN];
        assert_eq!(session_id(&a, &b), session_id(&b, &a));
        assert_eq!(session_id(&a, &a), 1);
    }
}
