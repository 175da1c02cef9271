//! Spellings of the local host: the table the README's rules section
//! shows, that the tests run over every path a destination can take (TCP
//! connect, `ws://`, `wss://`, JMUX OPEN, SOCKS5, HTTP CONNECT) and that
//! fuzz targets can start from. Each spelling must meet the same rules as
//! the address it [`Spelling::reaches`].

/// One way to write a destination host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spelling {
    /// The host as a guest or a peer writes it before `:PORT` (IPv6 in
    /// brackets).
    pub text: &'static str,
    /// The loopback address a socket to it reaches on Linux: `127.0.0.1`
    /// or `::1`.
    pub reaches: &'static str,
    /// Whether Linux really connects it to a listener on
    /// [`Spelling::reaches`]. IPv4-compatible and NAT64 addresses are
    /// matched as the IPv4 address they embed, but the kernel routes them
    /// as IPv6, so they do not connect; names may or may not resolve.
    pub connects: bool,
    /// Whether it is a host of a `ws://` URL (the WHATWG URL parser takes
    /// every IPv4 form and decodes percent-escapes, but no zone ids).
    pub in_url: bool,
    /// Whether it is a `host` of the TCP `connect("host:port")` call (no
    /// percent-escapes there).
    pub in_tcp: bool,
    /// What the spelling is.
    pub what: &'static str,
}

const fn s(
    text: &'static str,
    reaches: &'static str,
    connects: bool,
    in_url: bool,
    in_tcp: bool,
    what: &'static str,
) -> Spelling {
    Spelling {
        text,
        reaches,
        connects,
        in_url,
        in_tcp,
        what,
    }
}

const V4: &str = "127.0.0.1";
const V6: &str = "::1";

/// The table: 36 spellings of the loopback host.
pub const LOOPBACK: &[Spelling] = &[
    s("127.0.0.1", V4, true, true, true, "dotted decimal"),
    s("127.1", V4, true, true, true, "two parts"),
    s("127.0.1", V4, true, true, true, "three parts"),
    s("2130706433", V4, true, true, true, "one decimal number"),
    s("0x7f000001", V4, true, true, true, "one hex number"),
    s("017700000001", V4, true, true, true, "one octal number"),
    s("0x7f.1", V4, true, true, true, "hex, two parts"),
    s("0X7F.0.0.1", V4, true, true, true, "hex, upper case"),
    s("0x7f.0x0.0x0.0x1", V4, true, true, true, "hex, four parts"),
    s("0177.0.0.1", V4, true, true, true, "octal"),
    s("0177.1", V4, true, true, true, "octal, two parts"),
    s(
        "0177.0.0.01",
        V4,
        true,
        true,
        true,
        "octal and decimal mixed",
    ),
    s("127.0.0.1.", V4, true, true, true, "trailing dot"),
    s(
        "0.0.0.0",
        V4,
        true,
        true,
        true,
        "unspecified (Linux connects it locally)",
    ),
    s("0", V4, true, true, true, "unspecified, one number"),
    s("0x0", V4, true, true, true, "unspecified, hex"),
    s("00.0.0.0", V4, true, true, true, "unspecified, octal"),
    s(
        "[::ffff:127.0.0.1]",
        V4,
        true,
        true,
        true,
        "IPv4-mapped IPv6",
    ),
    s("[::ffff:7f00:1]", V4, true, true, true, "IPv4-mapped, hex"),
    s(
        "[::FFFF:7F00:0001]",
        V4,
        true,
        true,
        true,
        "IPv4-mapped, upper case, zeros",
    ),
    s(
        "[0:0:0:0:0:ffff:127.0.0.1]",
        V4,
        true,
        true,
        true,
        "IPv4-mapped, long form",
    ),
    s(
        "[::ffff:0.0.0.0]",
        V4,
        true,
        true,
        true,
        "IPv4-mapped unspecified",
    ),
    s(
        "[::ffff:0:0]",
        V4,
        true,
        true,
        true,
        "IPv4-mapped unspecified, hex",
    ),
    s(
        "[::127.0.0.1]",
        V4,
        false,
        true,
        true,
        "IPv4-compatible IPv6 (deprecated)",
    ),
    s("[::7f00:1]", V4, false, true, true, "IPv4-compatible, hex"),
    s(
        "[64:ff9b::7f00:1]",
        V4,
        false,
        true,
        true,
        "NAT64 well-known prefix",
    ),
    s(
        "%31%32%37.0.0.1",
        V4,
        true,
        true,
        false,
        "percent-encoded (URLs)",
    ),
    s("localhost", V4, true, true, true, "name"),
    s("LOCALHOST", V4, true, true, true, "name, upper case"),
    s("localhost.", V4, true, true, true, "name, trailing dot"),
    s("[::1]", V6, true, true, true, "IPv6 loopback"),
    s(
        "[0:0:0:0:0:0:0:1]",
        V6,
        true,
        true,
        true,
        "IPv6 loopback, long form",
    ),
    s("[0000::0001]", V6, true, true, true, "IPv6 loopback, zeros"),
    s(
        "[::]",
        V6,
        true,
        true,
        true,
        "IPv6 unspecified (Linux connects it locally)",
    ),
    s(
        "[0::0]",
        V6,
        true,
        true,
        true,
        "IPv6 unspecified, long form",
    ),
    s(
        "[::1%1]",
        V6,
        true,
        false,
        true,
        "IPv6 loopback with a zone id",
    ),
];
