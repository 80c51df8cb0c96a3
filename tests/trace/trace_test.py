"""Traces of real jobs (see Note [Tracing], common/trace.h): the examples run as
real processes under tessera-run --trace, and their files are read back.

  trace_test.py TESSERA_RUN PIPELINE DDP_FASHION_MNIST PARAMETER_SERVER RPC_DEMO TESSERA_TRACE
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

TESSERA_RUN, PIPELINE, DDP, PARAMETER_SERVER, RPC_DEMO, TESSERA_TRACE = sys.argv[1:7]
RUN_TIMEOUT_S = 600
# Timestamps are microseconds since 1970 as JSON numbers: a double holds them
# to a quarter of a microsecond.
PRECISION_US = 0.5


def run_job(nproc, trace_dir, program, *args, env=None):
    """Runs a job to its end under tessera-run --trace; its output."""
    done = subprocess.run(
        [TESSERA_RUN, "--standalone", "--nproc_per_node", str(nproc), "--trace", trace_dir,
         program, *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=RUN_TIMEOUT_S,
        env=env)
    if done.returncode != 0:
        raise AssertionError(f"{program} exited {done.returncode}:\n{done.stdout}")
    return done.stdout


def load(path):
    """A trace file, parsed strictly (it must be valid JSON as it stands)."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)["traceEvents"]


def load_dir(trace_dir):
    """{worker name: events} of every file in trace_dir."""
    traces = {}
    for name in sorted(os.listdir(trace_dir)):
        if name.endswith(".json"):
            traces[name[:-len(".json")]] = load(os.path.join(trace_dir, name))
    return traces


def spans(events, category=None):
    return [e for e in events if e["ph"] == "X" and (category is None or e["cat"] == category)]


def clock_error_us(events):
    clock = [e for e in events if e["ph"] == "M" and e["name"] == "tessera_clock"]
    assert len(clock) == 1, "no tessera_clock metadata event"
    return clock[0]["args"]["error_bound_us"]


class PipelineTraceTest(unittest.TestCase):
    """The pipeline example under 1F1B: every worker traced, stage spans in 1F1B order."""

    STAGES = 2
    MICRO_BATCHES = 8

    def test_one_f_one_b_order(self):
        with tempfile.TemporaryDirectory() as trace_dir:
            run_job(3, trace_dir, PIPELINE, "--schedule", "1f1b", "--micro_batches",
                    str(self.MICRO_BATCHES), "--max_steps", "2", "--epochs", "1")
            traces = load_dir(trace_dir)
        self.assertEqual(sorted(traces), ["driver", "stage1", "stage2"])
        for worker, events in traces.items():
            self.assertTrue(spans(events), f"{worker} wrote no spans")
        for worker in ("stage1", "stage2"):
            stage_spans = spans(traces[worker], "pipeline")
            contexts = sorted({e["args"]["context"] for e in stage_spans})
            self.assertEqual(len(contexts), 2, f"{worker}: steps {contexts}")
            for context in contexts:
                step = [e for e in stage_spans if e["args"]["context"] == context]
                self.check_step(worker, step)

    def check_step(self, worker, step):
        def by_micro(events, kind):
            return {e["args"]["micro_batch"]: e for e in events if e["name"].startswith(kind)}
        forward, backward = by_micro(step, "forward"), by_micro(step, "backward")
        micro = list(range(self.MICRO_BATCHES))
        self.assertEqual(sorted(forward), micro, f"{worker}: forwards")
        self.assertEqual(sorted(backward), micro, f"{worker}: backwards")
        end = lambda e: e["ts"] + e["dur"]
        for i in micro:
            self.assertLessEqual(end(forward[i]), backward[i]["ts"],
                                 f"{worker}: micro-batch {i}'s backward began before its forward ended")
        # 1F1B: at most STAGES micro-batches in flight on a stage (forward begun,
        # backward not ended), whatever the number of micro-batches ...
        edges = sorted([(forward[i]["ts"], 1) for i in micro] + [(end(backward[i]), -1) for i in micro],
                       key=lambda edge: (edge[0], edge[1]))
        in_flight = peak = 0
        for _, change in edges:
            in_flight += change
            peak = max(peak, in_flight)
        self.assertLessEqual(peak, self.STAGES, f"{worker}: {peak} micro-batches in flight")
        # ... so backwards interleave with forwards (GPipe would run every forward first).
        self.assertLess(backward[0]["ts"], forward[self.MICRO_BATCHES - 1]["ts"],
                        f"{worker}: all forwards ran before the first backward (GPipe's order)")


class RpcTraceTest(unittest.TestCase):
    """The RPC demo: a call's caller and callee spans are linked by a flow."""

    def test_caller_and_callee_spans_are_linked(self):
        with tempfile.TemporaryDirectory() as trace_dir:
            env = dict(os.environ, TESSERA_METRICS="1")
            out = run_job(3, trace_dir, RPC_DEMO, env=env)
            traces = load_dir(trace_dir)
        self.assertEqual(sorted(traces), ["worker0", "worker1", "worker2"])
        starts, ends = {}, {}  # flow id -> (worker, event)
        for worker, events in traces.items():
            for e in events:
                if e["ph"] == "s":
                    starts[e["id"]] = (worker, e)
                elif e["ph"] == "f":
                    ends[e["id"]] = (worker, e)
        linked = 0
        for flow, (caller, start) in starts.items():
            if flow not in ends:
                continue
            callee, finish = ends[flow]
            self.assertNotEqual(caller, callee)
            caller_span = self.span_at(traces[caller], start, lambda e: "to" in e["args"])
            callee_span = self.span_at(traces[callee], finish,
                                       lambda e: e["name"].endswith(" (queued)"))
            self.assertEqual(caller_span["args"]["to"], callee)
            self.assertEqual(callee_span["args"]["from"], caller)
            self.assertEqual(callee_span["name"], caller_span["name"] + " (queued)")
            # The callee's spans lie inside the caller's, up to the clocks' error.
            slack = clock_error_us(traces[caller]) + clock_error_us(traces[callee]) + 1
            running = [e for e in spans(traces[callee]) if e["tid"] == callee_span["tid"]
                       and e["name"] == caller_span["name"]
                       and abs(e["ts"] - (callee_span["ts"] + callee_span["dur"])) < PRECISION_US]
            self.assertEqual(len(running), 1, f"no running span after {callee_span}")
            self.assertGreaterEqual(callee_span["ts"], caller_span["ts"] - slack)
            self.assertLessEqual(running[0]["ts"] + running[0]["dur"],
                                 caller_span["ts"] + caller_span["dur"] + slack)
            if caller_span["cat"] == "rpc":
                linked += 1
        self.assertGreater(linked, 1000, "few user calls linked")  # the demo's 2,000 async calls
        # TESSERA_METRICS=1: each worker's summary line, counting the demo's calls.
        for worker in traces:
            self.assertRegex(out, rf"metrics {worker}: calls out \d+")
        self.assertRegex(out, r"metrics worker0: calls out (\d{4,}) .*checked_sqrt 2001×")
        self.assertRegex(out, r"metrics worker2: .*errors INVALID_ARGUMENT=1")

    @staticmethod
    def span_at(events, flow_event, kind):
        """The span of `kind` that a flow event binds to: on its row, from its time."""
        matches = [e for e in spans(events) if e["tid"] == flow_event["tid"] and kind(e)
                   and abs(e["ts"] - flow_event["ts"]) < PRECISION_US]
        assert len(matches) == 1, f"no single span for {flow_event}: {matches}"
        return matches[0]


class DdpTraceTest(unittest.TestCase):
    """DDP on Fashion-MNIST: bucket allreduces start while backward still runs."""

    def test_buckets_overlap_backward(self):
        with tempfile.TemporaryDirectory() as trace_dir:
            run_job(2, trace_dir, DDP, "--epochs", "1", "--max_steps", "3",
                    "--bucket_cap_mb", "0.2")
            traces = load_dir(trace_dir)
        self.assertEqual(sorted(traces), ["rank0", "rank1"])
        for worker, events in traces.items():
            ddp = spans(events, "ddp")
            passes = [e for e in ddp if e["name"] == "backward"]
            buckets = [e for e in ddp if e["name"].startswith("allreduce bucket")]
            self.assertEqual(len(passes), 3, worker)
            self.assertGreater(len({e["name"] for e in buckets}), 1, f"{worker}: one bucket")
            for p in passes:
                inside = [b for b in buckets if p["ts"] <= b["ts"] < p["ts"] + p["dur"]]
                self.assertTrue(inside, f"{worker}: no bucket launched during backward {p}")
            self.assertTrue(spans(events, "collective"), f"{worker}: no collective spans")


class KilledWorkerTraceTest(unittest.TestCase):
    """A worker SIGKILLed mid-run leaves a trace file that parses as it is."""

    def test_sigkilled_worker_file_parses(self):
        with tempfile.TemporaryDirectory() as trace_dir:
            launcher = subprocess.Popen(
                [TESSERA_RUN, "--standalone", "--nproc_per_node", "3", "--trace", trace_dir,
                 PARAMETER_SERVER, "--epochs", "1"],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            try:
                victim = self.wait_for_spans(launcher, trace_dir, rank=1, count=300)
                os.kill(victim, signal.SIGKILL)
                out, _ = launcher.communicate(timeout=RUN_TIMEOUT_S)
            finally:
                if launcher.poll() is None:
                    launcher.kill()
            self.assertNotEqual(launcher.returncode, 0, out)
            traces = load_dir(trace_dir)  # strict: every file, the killed one too
        self.assertEqual(len(traces), 3)
        killed = [events for events in traces.values()
                  if any(e["ph"] == "M" and e["name"] == "process_name" and e["pid"] == 1
                         for e in events)]
        self.assertEqual(len(killed), 1)
        self.assertGreaterEqual(len(spans(killed[0])), 300)

    def wait_for_spans(self, launcher, trace_dir, rank, count):
        """The pid of `rank`'s worker once its trace holds `count` spans."""
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while time.monotonic() < deadline:
            self.assertIsNone(launcher.poll(), "the job ended before the kill")
            pid = self.worker_pid(launcher.pid, rank)
            if pid is not None:
                for name in os.listdir(trace_dir):
                    try:
                        events = load(os.path.join(trace_dir, name))
                    except json.JSONDecodeError:
                        # Read while a write moved its closing bracket: the
                        # file is whole before and after each write.
                        continue
                    if (any(e["ph"] == "M" and e["name"] == "process_name" and e["pid"] == rank
                            for e in events) and len(spans(events)) >= count):
                        return pid
            time.sleep(0.05)  # polling a file's growth, bounded by the deadline
        self.fail(f"rank {rank} wrote fewer than {count} spans in {RUN_TIMEOUT_S} s")

    @staticmethod
    def worker_pid(launcher_pid, rank):
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parent = int(f.read().rsplit(")", 1)[1].split()[1])
                with open(f"/proc/{entry}/environ", "rb") as f:
                    environ = f.read().split(b"\0")
            except (OSError, ValueError, IndexError):
                continue
            if parent == launcher_pid and f"RANK={rank}".encode() in environ:
                return int(entry)
        return None


class TesseraTraceToolTest(unittest.TestCase):
    """scripts/tessera-trace: merge, summary and timeline of a real trace."""

    def test_merge_summary_timeline(self):
        with tempfile.TemporaryDirectory() as work:
            trace_dir = os.path.join(work, "trace")
            run_job(3, trace_dir, PIPELINE, "--schedule", "gpipe", "--micro_batches", "4",
                    "--max_steps", "2", "--epochs", "1")
            total = sum(len(events) for events in load_dir(trace_dir).values())
            merged = os.path.join(work, "job.json")
            subprocess.run([TESSERA_TRACE, "merge", trace_dir, "-o", merged], check=True)
            events = load(merged)
            self.assertEqual(len(events), total)
            self.assertEqual({e["pid"] for e in events}, {0, 1, 2})
            summary = subprocess.run([TESSERA_TRACE, "summary", trace_dir], check=True,
                                     stdout=subprocess.PIPE, text=True).stdout
            for heading in ("Spans by total time", "Busy fraction", "Slowest calls"):
                self.assertIn(heading, summary)
            for worker in ("driver", "stage1", "stage2"):
                self.assertRegex(summary, rf"{worker} +\d+\.\d% of")
            picture = os.path.join(work, "timeline.png")
            subprocess.run([TESSERA_TRACE, "timeline", f"GPipe={trace_dir}", "-o", picture],
                           check=True)
            with open(picture, "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")

    def test_bubble_of_a_known_trace(self):
        # Two stage workers, two steps; the first (a warm-up) is left out.
        # Step 2 spans 0-40 us: stage1 works 0-10 and 20-30 (idle 0.5),
        # stage2 10-40 with an overlapping span counted once (idle 0.25).
        def span(pid, context, name, ts, dur):
            return {"ph": "X", "pid": pid, "tid": 1, "cat": "pipeline", "name": name,
                    "ts": 1000 * context + ts, "dur": dur, "args": {"context": context}}

        def named(pid, name):
            return {"ph": "M", "pid": pid, "name": "process_name", "args": {"name": name}}

        with tempfile.TemporaryDirectory() as work:
            events = {1: [named(1, "stage1"), span(1, 1, "F0@0", 0, 500),
                          span(1, 2, "F0@0", 0, 10), span(1, 2, "B0@0", 20, 10)],
                      2: [named(2, "stage2"), span(2, 1, "F0@1", 500, 500),
                          span(2, 2, "F0@1", 10, 30), span(2, 2, "W0@1", 15, 10)]}
            for pid, mine in events.items():
                with open(os.path.join(work, f"stage{pid}.json"), "w") as f:
                    json.dump({"traceEvents": mine}, f)
            out = subprocess.run([TESSERA_TRACE, "bubble", work], check=True,
                                 stdout=subprocess.PIPE, text=True).stdout
            self.assertIn("1 steps: 0.04 ms a step", out)
            self.assertIn("stage1: idle 0.500", out)
            self.assertIn("stage2: idle 0.250", out)
            self.assertIn("mean idle 0.375", out)
            self.assertIn("W 0.01 ms", out)
            self.assertIn("costs F B W: 0.02 0.01 0.01", out)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"])
