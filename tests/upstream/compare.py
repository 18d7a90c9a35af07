#!/usr/bin/env python3
"""Key-for-key comparison of liblb's field-compatible placements with the real upstream.

    compare.py PLACEMENT_BINARY WORKDIR SYSTEM...

SYSTEM is one of: ketama (libmemcached, via tests/upstream/ketama.c built in WORKDIR),
ketama-ports (PyPI uhashring, importable, and npm hashring in WORKDIR/node_modules),
nginx (a live nginx on loopback: `hash $arg_key consistent` for nginx_chash, its default
smooth weighted round robin for weighted_round_robin), jump (Guava's Hashing.consistentHash via
tests/upstream/Jump.java). Each generates node sets and keys from a fixed seed, asks the
upstream and liblb (core/examples/placement.rs) for every key, and fails on the first
difference. Expectations are never stored: they come from the upstream program at test time.
"""

import json
import math
import os
import random
import subprocess
import sys

PLACEMENT = None
WORKDIR = None
GUAVA_JAR = "/usr/share/java/guava.jar"


def liblb(algorithm, nodes, queries, options=()):
    """Runs liblb's placement example; nodes are (id, weight); queries are command lines."""
    lines = [f"algorithm {algorithm}"]
    lines += [f"option {name} {value}" for name, value in options]
    lines += [f"node {node_id} {weight}" for node_id, weight in nodes]
    lines += queries
    result = subprocess.run(
        [PLACEMENT],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.splitlines()


def random_key(rng):
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-:/."
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40)))


def check(system, case, expected, actual, keys):
    if len(expected) != len(actual):
        sys.exit(f"{system} {case}: {len(expected)} upstream answers, {len(actual)} from liblb")
    for key, want, got in zip(keys, expected, actual):
        if want != got:
            sys.exit(f"{system} {case}: key {key!r}: upstream {want}, liblb {got}")


# --- ketama: libmemcached -------------------------------------------------------------------


def ketama_servers(rng, n, weights):
    """(liblb id, host, port, weight) for n servers: IPv4, names and IPv6, default port or not,
    the default port spelled out or left implicit."""
    servers = []
    seen = set()
    while len(servers) < n:
        kind = rng.random()
        if kind < 0.5:
            host = f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"
        elif kind < 0.8:
            host = f"cache-{rng.randint(0, 999)}.example"
        else:
            host = f"2001:db8::{rng.randint(1, 0xFFFF):x}"
        port = 11211 if rng.random() < 0.6 else rng.randint(1024, 65535)
        if (host, port) in seen:
            continue
        seen.add((host, port))
        v6 = ":" in host
        if port == 11211 and rng.random() < 0.5:
            node_id = f"[{host}]" if v6 and rng.random() < 0.5 else host
        else:
            node_id = f"[{host}]:{port}" if v6 else f"{host}:{port}"
        servers.append((node_id, host, port, weights(len(servers))))
    return servers


def compare_ketama():
    binary = os.path.join(WORKDIR, "ketama")
    rng = random.Random(11)
    cases = []
    # Equal weights at every size libmemcached supports, including those (25, ...) where
    # single-precision arithmetic gives each server 156 points instead of 160.
    for n in range(1, 101):
        cases.append((f"{n} equal", ketama_servers(rng, n, lambda i: 1)))
    for n in [2, 3, 5, 8, 13, 25, 40, 64, 99]:
        cases.append((f"{n} weights 1..10", ketama_servers(rng, n, lambda i: rng.randint(1, 10))))
        cases.append(
            (f"{n} weights 1..1000", ketama_servers(rng, n, lambda i: rng.randint(1, 1000)))
        )
    cases.append(("one heavy", ketama_servers(rng, 10, lambda i: 1000 if i == 0 else 1)))
    total = 0
    for name, servers in cases:
        keys = [random_key(rng) for _ in range(1000)]
        spec = os.path.join(WORKDIR, "ketama-servers.txt")
        with open(spec, "w") as f:
            for _, host, port, weight in servers:
                f.write(f"{host} {port} {weight}\n")
        upstream = subprocess.run(
            [binary, spec], input="\n".join(keys) + "\n", capture_output=True, text=True, check=True
        ).stdout.split()
        expected = [servers[int(i)][0] for i in upstream]
        actual = liblb("ketama", [(s[0], s[3]) for s in servers], [f"key {k}" for k in keys])
        check("ketama", name, expected, actual, keys)
        total += len(keys)
    print(f"ketama: {total} keys over {len(cases)} server sets agree with libmemcached")


# --- ketama: PyPI uhashring and npm hashring ----------------------------------------------


def f32(x):
    """x rounded to IEEE single precision."""
    import struct

    return struct.unpack("f", struct.pack("f", x))[0]


def libmemcached_digests(weight, total, n):
    """libmemcached's digests per server, in single precision (see core/src/select/ketama.rs)."""
    pct = f32(f32(weight) / f32(total))
    return int(f32(f32(f32(f32(pct * 160.0) / 4.0) * f32(n)) + f32(1e-10)))


def compare_ketama_ports():
    """uhashring (hash_fn='ketama') and npm hashring build the same continuum except for the
    point counts: exact integer (uhashring) or double (hashring) arithmetic where libmemcached
    uses single precision. Where the counts agree, all three must agree key for key (and
    hashring's range() must equal liblb's attempts); where they differ, liblb follows
    libmemcached and the differing keys are counted."""
    from uhashring import HashRing as UHashRing

    rng = random.Random(14)
    cases = []
    for n in [1, 2, 3, 5, 10, 25, 40, 64]:
        cases.append((f"{n} equal", n, lambda i: 1))
    for n in [2, 3, 7, 16, 33]:
        cases.append((f"{n} weights 1..10", n, lambda i: rng.randint(1, 10)))
        cases.append((f"{n} weights 1..500", n, lambda i: rng.randint(1, 500)))
    agreeing = differing = diverged_keys = total_keys = 0
    for name, n, weights in cases:
        servers = []
        while len(servers) < n:
            host = f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"
            port = 11211 if rng.random() < 0.5 else rng.randint(1024, 65535)
            if all(host != h for h, _, _ in servers):
                servers.append((host, port, weights(len(servers))))
        ids = [f"{h}:{p}" for h, p, _ in servers]
        total = sum(w for _, _, w in servers)
        keys = [random_key(rng) for _ in range(1000)]
        ours = liblb("ketama", [(i, s[2]) for i, s in zip(ids, servers)], [f"key {k}" for k in keys])
        walks = liblb(
            "ketama", [(i, s[2]) for i, s in zip(ids, servers)], [f"attempts 3 {k}" for k in keys]
        )
        # uhashring names nodes as libmemcached prints them: host for 11211, else host:port.
        names = [h if p == 11211 else f"{h}:{p}" for h, p, _ in servers]
        ring = UHashRing(
            {name: {"weight": w} for name, (_, _, w) in zip(names, servers)}, hash_fn="ketama"
        )
        by_name = dict(zip(names, ids))
        uhash = [by_name[ring.get_node(k)] for k in keys]
        request = {"servers": dict(zip(ids, [w for _, _, w in servers])), "keys": keys, "range": 3}
        out = subprocess.run(
            ["node", os.path.join(os.path.dirname(__file__), "hashring.js")],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            check=True,
            env=dict(os.environ, NODE_PATH=os.path.join(WORKDIR, "node_modules")),
        ).stdout.splitlines()
        npm = [line.split("\t")[0] for line in out]
        npm_range = [line.split("\t")[1] for line in out]
        exact = [40 * n * w // total for _, _, w in servers]
        single = [libmemcached_digests(w, total, n) for _, _, w in servers]
        double = [math.floor(w / total * 40 * n) for _, _, w in servers]
        total_keys += len(keys)
        if exact == single == double:
            check("uhashring", name, uhash, ours, keys)
            check("hashring", name, npm, ours, keys)
            check("hashring range", name, npm_range, walks, keys)
            agreeing += 1
        else:
            differing += 1
            diverged_keys += sum(1 for a, b in zip(uhash, ours) if a != b)
    print(
        f"ketama: {agreeing} server sets agree key for key with uhashring and npm hashring "
        f"(hashring's range() = liblb's attempts); in {differing} sets their point counts "
        f"differ from libmemcached's single-precision ones ({diverged_keys} of "
        f"{total_keys} keys placed differently by uhashring), and liblb follows libmemcached"
    )


# --- nginx: `hash $arg_key consistent` -------------------------------------------------------

NGINX_CONF = """
daemon on;
worker_processes 1;
pid {work}/nginx.pid;
error_log {work}/error.log warn;
events {{ worker_connections 512; }}
http {{
    access_log off;
    client_body_temp_path {work}/tmp;
    proxy_temp_path {work}/tmp;
    fastcgi_temp_path {work}/tmp;
    uwsgi_temp_path {work}/tmp;
    scgi_temp_path {work}/tmp;
    upstream pool {{
{balance}
{servers}
    }}
    server {{
        listen 127.0.0.1:{front};
        # A backend that cannot be reached fails the test instead of passing the key on.
        location / {{ proxy_pass http://pool; proxy_next_upstream off; }}
    }}
{backends}
}}
"""


def nginx_servers(rng, n, weights, base_port):
    """(server text, listen address, weight) for n loopback backends: 127.0.0.x:port,
    [::1]:port and one unix socket, so nginx's host/port split is exercised on each form."""
    servers = []
    for i in range(n):
        port = base_port + 1 + i
        kind = rng.random()
        if i == 0 and n > 2:
            path = os.path.join(WORKDIR, f"b{base_port}.sock")
            servers.append((f"unix:{path}", f"unix:{path}", weights(i)))
        elif kind < 0.25:
            servers.append((f"[::1]:{port}", f"[::1]:{port}", weights(i)))
        else:
            addr = f"127.0.0.{rng.randint(2, 250)}:{port}"
            servers.append((addr, addr, weights(i)))
    return servers


def nginx_run(servers, front, keys, down=None, balance="hash $arg_key consistent;"):
    """Starts nginx with `servers` (server `down` marked down) balanced by `balance` (empty:
    nginx's default smooth weighted round robin), sends one request per key, one after another
    on one connection, returns the backend indices."""
    import http.client
    import time
    import urllib.parse

    os.makedirs(os.path.join(WORKDIR, "tmp"), exist_ok=True)
    # nginx's workers drop root: they must be able to reach the unix socket in WORKDIR.
    os.chmod(WORKDIR, 0o755)
    conf = NGINX_CONF.format(
        work=WORKDIR,
        front=front,
        balance=f"        {balance}" if balance else "",
        servers="\n".join(
            f"        server {text} weight={w}{' down' if i == down else ''};"
            for i, (text, _, w) in enumerate(servers)
        ),
        backends="\n".join(
            f'    server {{ listen {listen}; location / {{ return 200 "{i}"; }} }}'
            for i, (_, listen, _) in enumerate(servers)
        ),
    )
    path = os.path.join(WORKDIR, "nginx.conf")
    with open(path, "w") as f:
        f.write(conf)
    subprocess.run(["nginx", "-p", WORKDIR, "-c", path], check=True)
    pid_file = os.path.join(WORKDIR, "nginx.pid")
    try:
        for _ in range(100):
            try:
                http.client.HTTPConnection("127.0.0.1", front, timeout=5).connect()
                break
            except OSError:
                time.sleep(0.05)
        conn = http.client.HTTPConnection("127.0.0.1", front, timeout=10)
        answers = []
        for key in keys:
            conn.request("GET", "/?key=" + urllib.parse.quote(key, safe=""))
            response = conn.getresponse()
            body = response.read().decode()
            if response.status != 200:
                sys.exit(f"nginx: HTTP {response.status} for key {key!r}: {body}")
            answers.append(int(body))
        conn.close()
        return answers
    finally:
        subprocess.run(
            ["nginx", "-p", WORKDIR, "-c", path, "-s", "quit"], check=False, capture_output=True
        )
        for _ in range(100):
            if not os.path.exists(pid_file):
                break
            time.sleep(0.05)


def compare_nginx():
    rng = random.Random(12)
    # Below Linux's ephemeral range (32768-60999): a port there may still be held by an
    # earlier run's client connection.
    base = rng.randint(20000, 29000)
    cases = []
    for n in [1, 2, 3, 5, 8, 13]:
        cases.append((f"{n} equal", n, lambda i: 1))
    for n in [2, 4, 7, 16, 30]:
        cases.append((f"{n} weights 1..5", n, lambda i: rng.randint(1, 5)))
    cases.append(("one heavy", 6, lambda i: 20 if i == 1 else 1))
    total = walked = 0
    for number, (name, n, weights) in enumerate(cases):
        base_port = base + 100 * number
        servers = nginx_servers(rng, n, weights, base_port)
        # URL-safe keys: nginx hashes the raw query text, which then equals the key itself.
        alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.~"
        keys = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 30))) for _ in range(800)]
        upstream = nginx_run(servers, base_port, keys)
        expected = [servers[i][0] for i in upstream]
        actual = liblb("nginx_chash", [(s[0], s[2]) for s in servers], [f"key {k}" for k in keys])
        check("nginx", name, expected, actual, keys)
        total += len(keys)
        if n >= 3:
            # nginx walks past a `down` server to the next point's server: liblb's attempts.
            down = n - 1
            upstream = nginx_run(servers, base_port, keys, down)
            expected = [servers[i][0] for i in upstream]
            walks = liblb(
                "nginx_chash", [(s[0], s[2]) for s in servers], [f"attempts 2 {k}" for k in keys]
            )
            actual = [next(x for x in w.split() if x != servers[down][0]) for w in walks]
            check("nginx", f"{name}, server {down} down", expected, actual, keys)
            total += len(keys)
            walked += sum(1 for w in walks if w.split()[0] == servers[down][0])
    print(
        f"nginx_chash: {total} keys over {len(cases)} upstream blocks agree with nginx "
        f"({walked} of them walked past a down server)"
    )


def compare_nginx_wrr():
    """nginx's default balancing, smooth weighted round robin (`ngx_http_upstream_get_peer`),
    against weighted_round_robin: the same servers in the same order over three periods and a
    bit, from one worker. Ties (equal weights, equal current weights) are where nginx's rule,
    the first server in order, decides."""
    rng = random.Random(13)
    base = rng.randint(20000, 29000)  # below the ephemeral range, as above
    cases = [("5,1,1", [5, 1, 1]), ("6 equal", [1] * 6), ("ties", [3, 3, 2, 2, 1, 1, 3])]
    cases.append(("one heavy", [1, 20, 1, 1, 1, 1]))
    for n in [2, 4, 7, 16, 30]:
        cases.append((f"{n} weights 1..5", [rng.randint(1, 5) for _ in range(n)]))
    cases.append(("12 weights 1..40", [rng.randint(1, 40) for _ in range(12)]))
    total = 0
    for number, (name, weights) in enumerate(cases):
        base_port = base + 100 * number
        servers = nginx_servers(rng, len(weights), lambda i: weights[i], base_port)
        count = 3 * sum(weights) + 5
        upstream = nginx_run(servers, base_port, ["x"] * count, balance="")
        expected = [servers[i][0] for i in upstream]
        actual = liblb("weighted_round_robin", [(s[0], s[2]) for s in servers], ["key "] * count)
        check("nginx", f"smooth WRR {name} {weights}", expected, actual, range(count))
        total += count
    print(
        f"weighted_round_robin: {total} picks over {len(cases)} upstream blocks follow nginx's "
        f"smooth weighted round robin"
    )


# --- jump: Guava's Hashing.consistentHash --------------------------------------------------

LCG = 2862933555777941757


def guava_overflow_input():
    """An input whose first LCG step has h >>> 33 == 2^31 - 1, where Guava's int addition
    overflows (see core/src/select/jump.rs): Guava stops at bucket 0, the paper jumps on."""
    inverse = pow(LCG, -1, 1 << 64)
    return ((1 << 64) - 1 - 1) * inverse % (1 << 64)


def compare_jump():
    rng = random.Random(13)
    groups = {}
    for n in range(1, 301):
        groups[n] = [rng.getrandbits(64) for _ in range(40)]
    for n in [1000, 4096, 65535, 100003, 1 << 20]:
        groups[n] = [rng.getrandbits(64) for _ in range(2000)]
    for n in groups:
        groups[n] += [0, 1, (1 << 63) - 1, 1 << 63, (1 << 64) - 1]
    lines = [f"{h} {n}" for n, inputs in groups.items() for h in inputs]
    java = subprocess.run(
        ["java", "-cp", f"{GUAVA_JAR}:{WORKDIR}", "Jump"],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    position = 0
    for n, inputs in groups.items():
        expected = java[position : position + len(inputs)]
        position += len(inputs)
        actual = liblb("jump", [(str(i), 1) for i in range(n)], [f"hash {h}" for h in inputs])
        check("jump", f"{n} buckets", expected, actual, inputs)
    # The documented divergence, shown live: Guava's overflow stops at 0, liblb jumps on.
    h = guava_overflow_input()
    guava = subprocess.run(
        ["java", "-cp", f"{GUAVA_JAR}:{WORKDIR}", "Jump"],
        input=f"{h} 2\n",
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    ours = liblb("jump", [("0", 1), ("1", 1)], [f"hash {h}"])
    if (guava, ours) != (["0"], ["1"]):
        sys.exit(f"jump: Guava's int-overflow input {h}: Guava {guava}, liblb {ours}")
    print(
        f"jump: {len(lines)} inputs over {len(groups)} bucket counts agree with Guava "
        f"(and its int-overflow corner differs as documented)"
    )


def main():
    global PLACEMENT, WORKDIR
    PLACEMENT, WORKDIR = sys.argv[1], sys.argv[2]
    systems = {
        "ketama": compare_ketama,
        "ketama-ports": compare_ketama_ports,
        "nginx": lambda: (compare_nginx(), compare_nginx_wrr()),
        "jump": compare_jump,
    }
    for system in sys.argv[3:]:
        systems[system]()


if __name__ == "__main__":
    main()
