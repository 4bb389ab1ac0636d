"""Latency of one client on one kept-alive HTTP connection, as a service
calling `garden serve` sees it (Python's http.client keeps the connection
open, as most client libraries do).

    /usr/bin/python3 bench/keepalive_latency.py PORT MODEL [REQUESTS=2000] [BODY_FILE]

GETs the model's status, then POSTs BODY_FILE to :predict (when given),
REQUESTS times each after 50 warm-up requests; prints one line per route:
p50, p99 and max in milliseconds, and requests per second.
"""
import http.client
import sys
import time


def measure(connection, method, path, body, count):
    headers = {"Content-Type": "application/json"} if body else {}
    for _ in range(50):
        connection.request(method, path, body, headers)
        connection.getresponse().read()
    times = []
    start = time.perf_counter()
    for _ in range(count):
        t0 = time.perf_counter()
        connection.request(method, path, body, headers)
        answer = connection.getresponse()
        answer.read()
        if answer.status != 200:
            sys.exit("keepalive_latency.py: %s %s answered %d" % (method, path, answer.status))
        times.append(time.perf_counter() - t0)
    elapsed = time.perf_counter() - start
    times.sort()
    return (times[len(times) // 2] * 1e3, times[int(len(times) * 0.99)] * 1e3, times[-1] * 1e3,
            count / elapsed)


def main():
    port, model = int(sys.argv[1]), sys.argv[2]
    count = int(sys.argv[3]) if len(sys.argv) > 3 else 2000
    body = open(sys.argv[4], "rb").read() if len(sys.argv) > 4 else None
    connection = http.client.HTTPConnection("127.0.0.1", port)
    routes = [("status", "GET", "/v1/models/" + model, None)]
    if body:
        routes.append(("predict", "POST", "/v1/models/%s:predict" % model, body))
    for name, method, path, payload in routes:
        p50, p99, worst, rate = measure(connection, method, path, payload, count)
        print("%-8s p50 %.3f ms  p99 %.3f ms  max %.3f ms  %.0f requests/s" %
              (name, p50, p99, worst, rate))


if __name__ == "__main__":
    main()
