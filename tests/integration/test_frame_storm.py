"""10,000 random and mutated frames from several connections at once; afterwards a normal client
produces and consumes, and the broker log shows no panic."""
import random
import socket
import struct
import threading

import ck
from kafka_wire import templates
from records import check_partition, expected_by_partition

FRAMES = 10_000
CONNECTIONS = 8


def mutate(rng: random.Random, frame: bytes) -> bytes:
    b = bytearray(frame)
    kind = rng.randrange(6)
    if kind == 0:  # flip bytes
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    elif kind == 1:  # overwrite a byte with an edge value
        b[rng.randrange(4, len(b))] = rng.choice([0x00, 0x7F, 0x80, 0xFF])
    elif kind == 2:  # truncate the body, keeping the announced size honest
        b = b[:rng.randint(12, len(b))]
        b[0:4] = struct.pack(">i", len(b) - 4)
    elif kind == 3:  # append junk
        b += rng.randbytes(rng.randint(1, 64))
        b[0:4] = struct.pack(">i", len(b) - 4)
    elif kind == 4:  # an edge value over a 4-byte field (an array count or a length)
        at = rng.randrange(4, max(5, len(b) - 4))
        b[at:at + 4] = struct.pack(">i", rng.choice([-1, -2, 0x7FFFFFFF, 0x10000000, 65536]))
    else:  # lie about the frame size
        b[0:4] = struct.pack(">i", rng.choice([-1, 0, 3, 8, len(b) + 1, 1 << 30]))
    return bytes(b)


def random_frame(rng: random.Random) -> bytes:
    api_key = rng.choice([0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 18, 19, 20, 22, 32, 37, 47, 99, -1])
    version = rng.choice([0, 1, 2, 3, 4, 5, 9, 12, 13, 99, -1])
    payload = struct.pack(">hhi", api_key, version, rng.randrange(1 << 31)) + rng.randbytes(rng.randint(0, 300))
    return struct.pack(">i", len(payload)) + payload


def storm(port: int, seed: int, count: int, sent: list):
    rng = random.Random(seed)
    bases = templates()
    s = None
    n = 0
    while n < count:
        if s is None:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
        # Mostly one frame at a time, so that most frames reach a live connection; sometimes a
        # few pipelined.
        burst = []
        for _ in range(min(rng.choice([1, 1, 1, 4]), count - n)):
            burst.append(random_frame(rng) if rng.random() < 0.3 else mutate(rng, rng.choice(bases)))
        n += len(burst)
        try:
            s.sendall(b"".join(burst))
            # Take whatever came back, without waiting for answers that may never come.
            s.settimeout(0.005)
            while s.recv(65536):
                pass
            s.close()  # the broker closed the connection
            s = None
        except (socket.timeout, BlockingIOError):
            pass
        except OSError:
            s.close()
            s = None
        # Sometimes vanish mid-conversation.
        if s is not None and rng.random() < 0.1:
            s.close()
            s = None
    if s is not None:
        s.close()
    sent.append(n)


def test_ten_thousand_hostile_frames(make_broker):
    broker = make_broker(shards=2)
    ck.create_topic(broker.bootstrap, "storm", 1)
    sent = []
    threads = [threading.Thread(target=storm, args=(broker.port, seed, FRAMES // CONNECTIONS, sent))
               for seed in range(CONNECTIONS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert sum(sent) == FRAMES
    assert broker.alive()
    # Everyone else is still served, byte for byte.
    ck.create_topic(broker.bootstrap, "after-storm", 2)
    ck.produce(broker.bootstrap, "after-storm", 2000, 2)
    got = ck.consume(broker.bootstrap, "after-storm", [0, 1], 2000)
    want = expected_by_partition(2000, 2)
    for p in range(2):
        check_partition(got[p], want[p], f"after-storm[{p}]")
    broker.assert_no_panic()
