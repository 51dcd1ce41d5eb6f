"""How `./test.sh` fills the machine: its pytest sessions and the chapters it re-executes run in lanes, one per core.

Each chapter's engines compute on one thread (vLLM's CPU build binds its compute to one core and keeps another for
its scheduler; SGLang's cpu launch sets OMP_NUM_THREADS=1), so a chapter keeps about one core busy. On a 2-core
machine two chapters, each pinned to its own core, took about as long side by side as each alone, every checked cell
passing (chapters 00 and 02). So a job (a test session or a chapter under nbval) runs pinned to its lane's cores, with
vLLM's compute bound to them too (its auto-binding would pick the same core in every lane); whenever a lane is free it
takes the longest job left, by the run time each job last recorded or is estimated to need.

Memory decides what may run together. Chapters 06 and 04 side by side once took all 24 GiB of a 2-core machine and
the kernel killed SGLang's servers: chapter 06 keeps four vLLM servers up at once. So a lane takes only a job whose
memory, with what runs already, fits in BUDGET_SHARE of the machine's: a chapter by the peak its last execution
recorded (`peak_gib`, servelab.machine.memory_peak) with a MARGIN, a session by the GiB `test.sh` gives it. A chapter
that never recorded its peak is taken to need UNMEASURED_SHARE of the budget: only light jobs run beside it. Where
nothing fits, the lane waits for a job to end; a job that fits nowhere runs alone. Each job's own peak is measured
and printed beside its estimate.

A chapter that reads results another re-executed chapter saves waits for that chapter to end, since it must read what
it saved in this run; meanwhile the lanes take other jobs. With one core there is one lane, and nothing is pinned.

`python -m servelab.book.lanes --stale FILE --sessions FILE --logs DIR [-- PYTEST ARGS]` runs them: the stale
chapters one path a line (`servelab keys --write`), the test sessions one `NAME<TAB>SECONDS<TAB>GIB<TAB>COMMAND` a
line. It prints every job's output, each lane's jobs and the engine starts of them all, and exits 1 when a job failed.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from servelab.book.chapters import NOTEBOOKS, REPO
from servelab.book.execution_key import recorded
from servelab.book.start_log import start_summary
from servelab.machine.memory_peak import PeakMemory

UNRECORDED_S = 600  # a chapter that never recorded its run time is taken to be long
BUDGET_SHARE = 0.85  # of the machine's memory, what the jobs running together may hold; the rest for the system
# Over a chapter's recorded peak: a run of it may hold more than the last did. In a whole --all run on the 2-core
# machine, no chapter's peak in a lane, beside another job, was more than 1 % above its peak executed alone.
MARGIN = 1.1
UNMEASURED_SHARE = 0.75  # of the budget, what a chapter that never recorded its peak is taken to need
NBVAL = ["--nbval-lax", "--nbval-sanitize-with", "tests/nbval_sanitize.cfg", "-p", "no:cacheprovider",
         "--durations=15"]
NO_TESTS = 5  # pytest's exit status when it collected nothing


@dataclass(frozen=True)
class Job:
    name: str
    command: tuple[str, ...]
    seconds: float  # how long it last took, or is estimated to take: the longest runs first
    gib: float | None = None  # the memory it is estimated to need at most; None: never measured
    needs: tuple[str, ...] = ()  # the jobs that must end before it starts


@dataclass
class Done:
    job: Job
    cpus: tuple[int, ...]
    returncode: int
    seconds: float
    log: Path
    peak_gib: float = 0.0


@dataclass
class Lane:
    cpus: tuple[int, ...]  # empty: not pinned
    done: list[Done] = field(default_factory=list)

    @property
    def vllm_bind(self) -> str:
        """VLLM_CPU_OMP_THREADS_BIND for this lane: its own cores, the first left to vLLM's scheduler where it has
        several, as vLLM's auto-binding leaves one."""
        cores = self.cpus[1:] if len(self.cpus) > 1 else self.cpus
        return ",".join(map(str, cores))


def _positive(meta: dict, name: str) -> float | None:
    value = meta.get(name)
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def _seconds(meta: dict) -> float:
    return _positive(meta, "seconds") or float(UNRECORDED_S)


def recorded_seconds(notebook: Path) -> float:
    return _seconds(recorded(notebook) or {})


def _estimate_gib(meta: dict) -> float | None:
    """The chapter's recorded peak memory with the MARGIN, or None where its last execution did not record one."""
    peak = _positive(meta, "peak_gib")
    return None if peak is None else peak * MARGIN


def machine_gib() -> float:
    """The machine's memory (MemTotal), in GiB."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) / 2**20
    raise RuntimeError("no MemTotal in /proc/meminfo")


def split_cpus(cpus: list[int], n: int) -> list[tuple[int, ...]]:
    """`cpus` in `n` contiguous parts as even as can be (the first parts one larger)."""
    if not 1 <= n <= len(cpus):
        raise ValueError(f"cannot split {len(cpus)} cores into {n} lanes: give 1 to {len(cpus)} lanes")
    size, extra = divmod(len(cpus), n)
    parts, start = [], 0
    for i in range(n):
        end = start + size + (i < extra)
        parts.append(tuple(cpus[start:end]))
        start = end
    return parts


def chapter_jobs(stale: list[str], notebooks: Path = NOTEBOOKS, pytest_args: tuple[str, ...] = ()) -> list[Job]:
    """One nbval job per stale chapter, each needing the stale chapters whose saves it reads."""
    metas = {name: recorded(notebooks / f"{name}.ipynb") or {} for name in stale}  # megabytes each: read once
    saves = {name: set(meta.get("saves", [])) for name, meta in metas.items()}
    jobs = [Job(name, (sys.executable, "-m", "pytest", _relative(notebooks / f"{name}.ipynb"), *NBVAL, *pytest_args),
                _seconds(metas[name]), _estimate_gib(metas[name]),
                tuple(other for other in stale
                      if other != name and set(metas[name].get("reads", {})) & saves[other]))
            for name in stale]
    _check_order(jobs)
    return jobs


def _check_order(jobs: list[Job]) -> None:
    """Raise where some jobs can never start: each needs another of them (or a job that is not there)."""
    ended, left = set(), list(jobs)
    while left:
        ready = [j for j in left if set(j.needs) <= ended]
        if not ready:
            raise ValueError(f"chapters {', '.join(j.name for j in left)} each need another of them to run first "
                             "(each reads what another saves): no order re-executes them")
        ended |= {j.name for j in ready}
        left = [j for j in left if j not in ready]


def _relative(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def lanes_for(cpus: list[int], max_lanes: int = 2) -> list[Lane]:
    n = min(max_lanes, len(cpus))
    return [Lane(())] if n < 2 else [Lane(part) for part in split_cpus(sorted(cpus), n)]


def run(jobs: list[Job], lanes: list[Lane], logs: Path, budget_gib: float, env: dict[str, str] | None = None,
        ) -> list[Lane]:
    """Every job, each lane taking the longest job left whose needs have ended and that fits in `budget_gib` beside
    the running ones whenever it is free; each job's output in `logs`/NAME.log and its engine starts in
    `logs`/NAME.starts.jsonl."""
    queue = sorted(jobs, key=lambda j: (-j.seconds, j.name))
    state = threading.Condition()
    held = [0.0]  # what the running jobs are estimated to hold
    ended: set[str] = set()
    running = [0]
    base = dict(os.environ if env is None else env)

    def need(job: Job) -> float:
        return UNMEASURED_SHARE * budget_gib if job.gib is None else job.gib

    def take() -> Job | None:
        with state:
            while queue:
                ready = [j for j in queue if ended.issuperset(j.needs)]
                job = next((j for j in ready if held[0] + need(j) <= budget_gib), None)
                if job is None and ready and not running[0]:
                    job = ready[0]  # fits nowhere: runs alone
                if job is not None:
                    queue.remove(job)
                    held[0] += need(job)
                    running[0] += 1
                    return job
                state.wait()
            return None

    def work(lane: Lane) -> None:
        while (job := take()) is not None:
            log = logs / f"{job.name}.log"
            job_env = {**base, "SERVELAB_START_LOG": str(logs / f"{job.name}.starts.jsonl")}
            if lane.cpus:
                job_env["VLLM_CPU_OMP_THREADS_BIND"] = lane.vllm_bind
            pin = ("taskset", "-c", ",".join(map(str, lane.cpus))) if lane.cpus and shutil.which("taskset") else ()
            start = time.monotonic()
            with open(log, "w") as out:
                proc = subprocess.Popen([*pin, *job.command], stdout=out, stderr=subprocess.STDOUT, env=job_env,
                                        cwd=REPO)
                with PeakMemory(proc.pid) as peak:
                    returncode = proc.wait()
            lane.done.append(Done(job, lane.cpus, returncode, time.monotonic() - start, log, peak.gib))
            with state:
                held[0] -= need(job)
                running[0] -= 1
                ended.add(job.name)
                state.notify_all()

    threads = [threading.Thread(target=work, args=(lane,)) for lane in lanes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return lanes


def _number(text: str) -> bool:
    return text.replace(".", "", 1).isdigit()


def read_sessions(path: Path, pytest_args: tuple[str, ...] = ()) -> list[Job]:
    """Test sessions from `NAME<TAB>SECONDS<TAB>GIB<TAB>COMMAND` lines (the command split as a shell would, extra
    pytest arguments appended)."""
    jobs = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != 4 or not (_number(parts[1]) and _number(parts[2])):
            raise ValueError(f"{path}:{number}: {line!r} is not NAME<TAB>SECONDS<TAB>GIB<TAB>COMMAND")
        jobs.append(Job(parts[0], (*shlex.split(parts[3]), *pytest_args), float(parts[1]), float(parts[2])))
    return jobs


def _estimate(job: Job) -> str:
    return "never measured" if job.gib is None else f"{job.gib:.1f} GiB"


def report(lanes: list[Lane]) -> int:
    """Print each job's output and a summary line per job; 1 when a job failed, or when every job collected
    nothing (a run must test something)."""
    done = sorted((d for lane in lanes for d in lane.done), key=lambda d: d.job.name)
    for d in done:
        print(f"[lanes] ---- {d.job.name} ----")
        print(d.log.read_text(), end="")
    for lane in lanes:
        where = f"cores {','.join(map(str, lane.cpus))}" if lane.cpus else "not pinned"
        print(f"[lanes] {where}: " + ", ".join(f"{d.job.name} {d.seconds:.0f} s, peak {d.peak_gib:.1f} GiB "
                                                f"(estimated {_estimate(d.job)}), exit {d.returncode}"
                                                for d in lane.done) + f"; {sum(d.seconds for d in lane.done):.0f} s")
    failed = [d for d in done if d.returncode not in (0, NO_TESTS)]
    nothing = bool(done) and all(d.returncode == NO_TESTS for d in done)
    return 1 if failed or nothing else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m servelab.book.lanes", description=__doc__.split("\n\n")[0])
    parser.add_argument("--stale", type=Path, required=True, help="the chapters to re-execute, one path a line")
    parser.add_argument("--sessions", type=Path, required=True, help="NAME<TAB>SECONDS<TAB>GIB<TAB>COMMAND lines")
    parser.add_argument("--logs", type=Path, required=True, help="a folder for each job's output")
    args, extra = parser.parse_known_args(argv)
    extra = tuple(a for a in extra if a != "--")
    stale = [Path(p).stem for p in args.stale.read_text().split()]
    jobs = read_sessions(args.sessions, extra) + chapter_jobs(stale, pytest_args=extra)  # only chapters have needs
    lanes = lanes_for(sorted(os.sched_getaffinity(0)))
    budget = BUDGET_SHARE * machine_gib()
    print(f"[lanes] {len(jobs)} jobs in {len(lanes)} lane(s), holding at most {budget:.1f} GiB together, the longest "
          "first: " + ", ".join(f"{j.name} (~{j.seconds:.0f} s, {_estimate(j)}"
                                + (f", after {', '.join(j.needs)}" if j.needs else "") + ")"
                                for j in sorted(jobs, key=lambda j: -j.seconds)), flush=True)
    run(jobs, lanes, args.logs, budget)
    status = report(lanes)
    print("[lanes] " + start_summary(sorted(args.logs.glob("*.starts.jsonl"))))
    return status


if __name__ == "__main__":
    sys.exit(main())
