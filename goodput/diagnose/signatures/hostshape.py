"""Which tokens of a log can be a host's name, judged by their shape alone.

A log names its hosts in whatever spelling the site chose: Kubernetes pod names
(`trainer-worker-3`, `job-abc12-master-0`), cloud names (`ip-10-1-2-3.ec2.internal`,
`a3-highgpu-8g-12`), site names (`nid001234`, `hgx-b200-r07-n12`), bare addresses. No list of
known formats can keep up, so where a log's structure puts a name (a line prefix, an address the
log pairs with a name) the token is judged by shape: a DNS name as RFC 1123 allows it, whose first
label numbers one machine among many (it carries a digit), or an IPv4 address. The same test keeps
other tokens out: a version (`2.4.0`, `cuda-12.1`: a numeric label after the first), a model name
(`llama-3-70b`: a parameter count), a path (`/ckpt/step-100`), a Python logger
(`torch.distributed.run`: no digit), a rank or interface label (`rank3`, `eth0`, `mlx5_0`). Only
plain string operations and RE2 (linear time); every input is bounded before it is looked at.
"""

from __future__ import annotations

from goodput.untrusted_text import LinearRegex

MAX_HOST_CHARS = 253  # RFC 1035's limit for a whole name
MAX_HCAS = 4
_LABEL = LinearRegex(r"[a-z0-9](?:[a-z0-9\-]{0,61}[a-z0-9])?")
_IPV4 = LinearRegex(r"(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})")
# A model's parameter count (`70b`, `8x7b`, `1b5`) as one dash-separated part of a name.
_PARAMETER_COUNT = LinearRegex(r"\d+(?:x\d+)?[bmkt]\d*")
# Words that label a process, a device or an interface, not a machine: `rank3`, `eth0`, `ib1`.
_NOT_A_MACHINE = LinearRegex(
    r"(?:rank|local|step|epoch|iter|iteration|layer|stage|cuda|device|dev|proc|process|thread|tp|pp|dp|"
    r"eth|ens|enp|eno|enx|ib|ibp|bond|hsn|veth|docker|lo|wlan|wlp|mlx|nvme|ata|sd|md|nvidia|python|py|v)\d+[a-z0-9]*")
# The HCA of a Mellanox/NVIDIA NIC (`mlx5_10`, RoCE link aggregation `mlx5_bond_0`), with its port
# when the line gives one (`mlx5_0:1`, NCCL's `[0]mlx5_0:1/IB`).
HCA = LinearRegex(r"\b(mlx[45]_(?:bond_)?\d{1,3})(?::(\d{1,2}))?")


def ipv4(token: str) -> bool:
    """Whether `token` is a dotted-quad IPv4 address (each part 0-255)."""
    found = _IPV4.fullmatch(token.encode("ascii", "replace")) if len(token) <= 15 else None
    return found is not None and all(int(found.group(i) or "999") <= 255 for i in range(1, 5))


def host_shaped(token: str) -> bool:
    """Whether `token` has the shape of one machine's name: an IPv4 address, or an RFC 1123 name
    (lower case, as schedulers and pod names write them) whose first label carries a digit."""
    if not token or len(token) > MAX_HOST_CHARS or not token.isascii():
        return False
    if ipv4(token):
        return True
    labels = token.split(".")
    if not all(_LABEL.fullmatch(label.encode()) for label in labels):
        return False
    first = labels[0]
    if not first[0].isalpha() or not any(c.isdigit() for c in first):
        return False
    # A later label is a domain (`ec2.internal`); a numeric one is a version (`cuda-12.1`, `v2.4.0`).
    if any(label.isdigit() for label in labels[1:]):
        return False
    parts = first.split("-")
    if _NOT_A_MACHINE.fullmatch(first.encode()):
        return False
    return not any(_PARAMETER_COUNT.fullmatch(p.encode()) for p in parts)


def numbered_machine(token: str) -> bool:
    """`host_shaped`, and numbered the way fleets number machines: an address, a dashed or dotted
    name (`gpu-a100-017`, `node1.cluster`), or a name ending in two or more digits (`node017`,
    `nid001234`). Stricter, for a bare `name: ` first on a line, where a kernel driver or device
    (`mlx5: `, `nvme0: `, `e1000e: `) speaks in the same form."""
    if not host_shaped(token):
        return False
    if ipv4(token) or "-" in token or "." in token:
        return True
    return len(token) - len(token.rstrip("0123456789")) >= 2


def bare_address(peer: str) -> str:
    """A peer as NCCL and c10d print it (`10.0.3.17<43210>`, `[10.0.3.17]:29500`, `10.0.3.17:29500`),
    without its port."""
    text = peer.strip()[:MAX_HOST_CHARS + 16]
    if text.startswith("["):
        return text[1:].partition("]")[0]
    text = text.partition("<")[0]
    host, colon, port = text.rpartition(":")
    return host if colon and port.isdigit() and host.count(":") == 0 else text


def aws_ip_name(address: str) -> str | None:
    """EC2's IP-based host name for an address: `10.1.2.3` is `ip-10-1-2-3` (Amazon EC2 User
    Guide, "Amazon EC2 instance hostname types": the IP name)."""
    return "ip-" + address.replace(".", "-") if ipv4(address) else None


def hcas(text: str) -> list[tuple[str, str | None]]:
    """The HCAs a line names (device, port or None), the first `MAX_HCAS`, in order."""
    found: list[tuple[str, str | None]] = []
    data = text[:4096].encode("utf-8", "replace")
    pos = 0
    while len(found) < MAX_HCAS:
        spans = HCA.search_spans(data, pos)
        if spans is None:
            break
        device = data[spans[1][0]:spans[1][1]].decode()
        port = data[spans[2][0]:spans[2][1]].decode() if spans[2][0] >= 0 else None
        if (device, port) not in found:
            found.append((device, port))
        pos = spans[0][1]
    return found
