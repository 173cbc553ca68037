//! WebSocket frames as a client writes them, for tests that speak the
//! protocol byte by byte, and the server's frames as they read them.
// Each test binary uses what it needs.
#![allow(dead_code)]

/// A masked client frame (the zero mask) with a final bit and `opcode`.
pub fn client_frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mut frame = vec![0x80 | opcode];
    match payload.len() {
        n @ 0..=125 => frame.push(0x80 | n as u8),
        n @ 126..=65535 => {
            frame.push(0x80 | 126);
            frame.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            frame.push(0x80 | 127);
            frame.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    frame.extend_from_slice(&[0, 0, 0, 0]);
    frame.extend_from_slice(payload);
    frame
}

/// The whole server frames (unmasked) at the start of `data`, as
/// (opcode, payload); a frame cut short, and what follows it, is left out.
pub fn server_frames(data: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut frames = Vec::new();
    let mut at = 0;
    while at + 2 <= data.len() {
        let opcode = data[at] & 0x0f;
        let (len, head) = match data[at + 1] & 0x7f {
            126 if at + 4 <= data.len() => {
                (u16::from_be_bytes([data[at + 2], data[at + 3]]) as usize, 4)
            }
            127 if at + 10 <= data.len() => {
                let mut len = [0u8; 8];
                len.copy_from_slice(&data[at + 2..at + 10]);
                (u64::from_be_bytes(len) as usize, 10)
            }
            126 | 127 => break,
            n => (n as usize, 2),
        };
        let start = at + head;
        if start + len > data.len() {
            break;
        }
        frames.push((opcode, data[start..start + len].to_vec()));
        at = start + len;
    }
    frames
}
