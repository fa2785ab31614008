//! What a connection's client sends, read frame by frame: its RST_STREAM frames
//! against `server.max_client_resets_per_minute`.

use std::time::Instant;

/// Finds the RST_STREAM frames in what a client sends: skips the client preface, then
/// reads each frame's 9-byte header (RFC 9113 §4.1) and skips its payload. h2 counts a
/// client's resets only while the reset streams wait to be accepted; this counts all.
pub(super) struct FrameScan {
    /// Bytes still to skip: the preface, then the current frame's payload.
    skip: usize,
    head: [u8; 9],
    head_len: usize,
}

impl FrameScan {
    const PREFACE_LEN: usize = 24;
    const RST_STREAM: u8 = 0x3;

    pub(super) fn new() -> Self {
        Self { skip: Self::PREFACE_LEN, head: [0; 9], head_len: 0 }
    }

    /// RST_STREAM frames whose header ends in `bytes`.
    pub(super) fn resets(&mut self, mut bytes: &[u8]) -> u32 {
        let mut resets = 0;
        while !bytes.is_empty() {
            if self.skip > 0 {
                let n = self.skip.min(bytes.len());
                self.skip -= n;
                bytes = &bytes[n..];
                continue;
            }
            let n = (self.head.len() - self.head_len).min(bytes.len());
            self.head[self.head_len..self.head_len + n].copy_from_slice(&bytes[..n]);
            self.head_len += n;
            bytes = &bytes[n..];
            if self.head_len == self.head.len() {
                let [a, b, c, kind, ..] = self.head;
                if kind == Self::RST_STREAM {
                    resets += 1;
                }
                self.skip = u32::from_be_bytes([0, a, b, c]) as usize;
                self.head_len = 0;
            }
        }
        resets
    }
}

/// `server.max_client_resets_per_minute` as a token bucket: the limit at once, refilled
/// at the limit per minute.
pub(super) struct ResetBudget {
    per_minute: f64,
    left: f64,
    at: Instant,
}

impl ResetBudget {
    pub(super) fn new(per_minute: u32) -> Self {
        let per_minute = f64::from(per_minute);
        Self { per_minute, left: per_minute, at: Instant::now() }
    }

    /// Spends `resets`; `false` once the budget is overdrawn.
    pub(super) fn spend(&mut self, resets: u32) -> bool {
        let now = Instant::now();
        let refill = now.duration_since(self.at).as_secs_f64() * self.per_minute / 60.0;
        self.left = (self.left + refill).min(self.per_minute) - f64::from(resets);
        self.at = now;
        self.left >= 0.0
    }
}
