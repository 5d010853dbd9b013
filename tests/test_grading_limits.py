"""The limits around a submission's kernel, piece by piece: where cgroups are found (on fake
cgroup trees of both versions, and on this machine), what one kernel's cgroups hold and how they
are emptied, the sandbox's /dev and its sizes, and what the worker keeps of what a kernel sends.
The same limits under attack, beside honest submissions, are in tests/test_grading_attacks.py."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
import zmq
import zmq.asyncio
from jupyter_client import AsyncKernelManager
from jupyter_core.utils import run_sync
from nbclient import NotebookClient

from nbhelpers.grading.cgroups import Cgroups, SubmissionCgroup, find_cgroups
from nbhelpers.grading.jobs import worker_env
from nbhelpers.grading.options import MAX_KERNEL_MESSAGE_BYTES, MAX_KERNEL_MESSAGES_QUEUED, GradeOptions
from nbhelpers.grading.sandbox import ONE_THREAD_ENV, Limits, _sandbox_args, disk_split, kernel_command
from nbhelpers.grading.worker import KERNEL_LAUNCHER, _Client, _KernelManager, capped_context, without_debugger

# ---- finding cgroups ------------------------------------------------------------------------------


def fake_v1(root: Path, own: str = "/grader") -> Path:
    """A cgroup v1 tree whose pids and memory hierarchies put this process in ``own``; a folder
    made in it gets the files a kernel would (as the cgroup file system makes them)."""
    for c, files in (("pids", ("pids.max",)), ("memory", ("memory.limit_in_bytes",))):
        (root / c / own.lstrip("/")).mkdir(parents=True)
    proc = root / "self_cgroup"
    proc.write_text(f"8:pids:{own}\n4:memory:{own}\n1:cpu:/\n0::/\n")
    return proc


def like_cgroupfs(monkeypatch, files: tuple[str, ...]) -> None:
    """Folders made from now on behave as in the cgroup file system: a new one holds ``files``, and
    one that holds nothing but such files can be removed."""
    real_mkdir, real_rmdir = Path.mkdir, Path.rmdir

    def mkdir(self, *a, **kw):
        real_mkdir(self, *a, **kw)
        for f in files:
            (self / f).write_text("")

    def rmdir(self):
        for f in self.iterdir() if self.is_dir() else []:
            if f.is_file():
                f.unlink()
        real_rmdir(self)

    monkeypatch.setattr(Path, "mkdir", mkdir)
    monkeypatch.setattr(Path, "rmdir", rmdir)


def test_cgroup_v1_is_found_where_its_folders_can_be_made(tmp_path, monkeypatch):
    proc = fake_v1(tmp_path)
    # a plain folder has no pids.max: the grader says so instead of trusting it
    why = find_cgroups(tmp_path, proc)
    assert isinstance(why, str) and "has no pids.max" in why
    like_cgroupfs(monkeypatch, ("pids.max", "memory.limit_in_bytes", "cgroup.procs"))
    found = find_cgroups(tmp_path, proc)
    assert found == Cgroups(1, {"pids": str(tmp_path / "pids/grader"), "memory": str(tmp_path / "memory/grader")})
    assert not list((tmp_path / "pids/grader").iterdir())  # the probe was removed
    cg = SubmissionCgroup(found, processes=64, memory_mb=512)
    assert [d.parent for d in cg.dirs] == [tmp_path / "pids/grader", tmp_path / "memory/grader"]
    assert (cg.dirs[0] / "pids.max").read_text() == "64"
    assert (cg.dirs[1] / "memory.limit_in_bytes").read_text() == str(512 * 2**20)
    assert cg.procs_files == [str(d / "cgroup.procs") for d in cg.dirs]
    assert cg.reached() == []
    (cg.dirs[0] / "pids.events").write_text("max 3\n")
    (cg.dirs[1] / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
    assert cg.reached() == ["processes", "memory"]
    cg.remove()
    assert not any(d.exists() for d in cg.dirs)


def test_cgroup_v1_cpu_quota_and_accounting_where_they_can_be_had(tmp_path, monkeypatch):
    """The cpu and cpuacct hierarchies (separate, or mounted together) are optional: found, each
    kernel gets its quota of CPUs per period, and its CPU seconds are read from cpuacct.usage."""
    proc = fake_v1(tmp_path)
    proc.write_text("8:pids:/grader\n4:memory:/grader\n2:cpu,cpuacct:/grader\n0::/\n")
    (tmp_path / "cpu,cpuacct" / "grader").mkdir(parents=True)
    files = ("pids.max", "memory.limit_in_bytes", "cgroup.procs", "cpu.cfs_quota_us", "cpuacct.usage")
    like_cgroupfs(monkeypatch, files)
    found = find_cgroups(tmp_path, proc)
    both = str(tmp_path / "cpu,cpuacct/grader")
    assert found.parents["cpu"] == found.parents["cpuacct"] == both
    assert "memory, processes and CPU" in found.describe()
    cg = SubmissionCgroup(found, processes=64, memory_mb=512, cpus=1.5)
    cpu_dir = Path(both) / cg.dirs[0].name
    assert cg.dirs[2:] == [cpu_dir]  # one folder for the two controllers
    assert (cpu_dir / "cpu.cfs_quota_us").read_text() == "150000"
    assert (cpu_dir / "cpu.cfs_period_us").read_text() == "100000"
    (cpu_dir / "cpuacct.usage").write_text("2500000000\n")
    assert cg.cpu_seconds() == 2.5
    cg.remove()
    assert not cpu_dir.exists()
    # without them: what there was before, and no CPU seconds
    (tmp_path / "cpu,cpuacct").rename(tmp_path / "elsewhere")
    found = find_cgroups(tmp_path, proc)
    assert set(found.parents) == {"pids", "memory"} and "CPU" not in found.describe()
    assert SubmissionCgroup(found, processes=64, memory_mb=512, cpus=1.5).cpu_seconds() is None


def test_cgroup_v2_is_found_where_the_controllers_can_be_enabled(tmp_path, monkeypatch):
    (tmp_path / "grader").mkdir()
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
    (tmp_path / "grader" / "cgroup.subtree_control").write_text("")
    proc = tmp_path / "self_cgroup"
    proc.write_text("0::/grader\n")
    like_cgroupfs(monkeypatch, ("pids.max", "memory.max", "cgroup.procs", "memory.events", "pids.events"))
    found = find_cgroups(tmp_path, proc)
    assert found == Cgroups(2, {"pids": str(tmp_path / "grader"), "memory": str(tmp_path / "grader")})
    assert (tmp_path / "grader" / "cgroup.subtree_control").read_text() == "+cpu"  # tried: +pids +memory, then +cpu
    cg = SubmissionCgroup(found, processes=10, memory_mb=100)
    assert len(cg.dirs) == 1 and (cg.dirs[0] / "memory.max").read_text() == str(100 * 2**20)
    (cg.dirs[0] / "memory.events").write_text("low 0\nhigh 0\nmax 7\noom 1\noom_kill 1\n")
    assert cg.reached() == ["memory"]
    cg.remove()
    assert not cg.dirs[0].exists()
    # with the cpu controller: a quota, and the CPU seconds from cpu.stat
    like_cgroupfs(monkeypatch, ("pids.max", "memory.max", "cgroup.procs", "cpu.max", "cpu.stat"))
    found = find_cgroups(tmp_path, proc)
    assert found.parents == dict.fromkeys(("pids", "memory", "cpu", "cpuacct"), str(tmp_path / "grader"))
    cg = SubmissionCgroup(found, processes=10, memory_mb=100, cpus=2)
    assert len(cg.dirs) == 1 and (cg.dirs[0] / "cpu.max").read_text() == "200000 100000"
    (cg.dirs[0] / "cpu.stat").write_text("usage_usec 1250000\nuser_usec 1000000\n")
    assert cg.cpu_seconds() == 1.25
    cg.remove()


def test_no_cgroups_is_said_in_words(tmp_path):
    proc = tmp_path / "self_cgroup"
    proc.write_text("0::/\n")
    assert "no writable pids and memory cgroups" in find_cgroups(tmp_path, proc)
    (tmp_path / "cgroup.controllers").write_text("memory pids\n")  # v2, but our cgroup is not there
    proc.write_text("0::/gone\n")
    assert "cannot be read" in find_cgroups(tmp_path, proc)
    assert "this system has no cgroups" in find_cgroups(tmp_path, tmp_path / "missing")
    opts = GradeOptions(cgroups_missing="no writable pids and memory cgroups (...) were found")
    assert opts.whole_submission_limits().startswith("none: per-process limits only (no writable")


def test_this_machines_cgroups_hold_a_kernels_processes():
    """Where this machine lets the grader make cgroups, a process started by kernel_command is in
    them before it runs anything, whatever it starts stays there, and remove() empties them."""
    where = find_cgroups()
    if isinstance(where, str):
        pytest.skip(f"no cgroups the grader can make here: {where}")
    cg = SubmissionCgroup(where, processes=16, memory_mb=0)
    try:
        code = "import subprocess; p = subprocess.Popen(['sleep', '30']); print(p.pid, flush=True); p.wait()"
        cmd = kernel_command([sys.executable, "-c", code], Path("/nonexistent"), Limits(), False, cg.procs_files)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        child = int(proc.stdout.readline())
        assert {proc.pid, child} <= cg.pids()
        cg.remove()
        assert proc.wait(timeout=10) != 0
        proc.stdout.close()
        assert not any(d.exists() for d in cg.dirs)
    finally:
        cg.remove()


def test_each_kernels_share_of_the_cores_is_the_machines_shared_among_the_jobs():
    from nbhelpers.grading.cli import default_cpus

    cores = len(os.sched_getaffinity(0))
    assert default_cpus(1) == max(1.0, cores) and default_cpus(2) == max(1.0, cores / 2)
    assert default_cpus(10 * cores) == 1.0  # never less than one CPU


def test_this_machines_cpu_cgroup_caps_what_a_kernels_processes_use_together():
    """Four processes that spin for 3 s, in the cgroups of a kernel given one CPU: together they
    use at most about one CPU (two on this 2-core machine without the cgroup, less when another
    job shares the cores), and the CPU seconds are counted."""
    where = find_cgroups()
    if isinstance(where, str) or "cpu" not in where.parents:
        pytest.skip(f"no cpu cgroup the grader can make here: {where}")
    cg = SubmissionCgroup(where, processes=16, memory_mb=0, cpus=1)
    spin = "import time\nt = time.time()\nwhile time.time() - t < 3:\n    pass\n"
    code = f"import subprocess, sys\nps = [subprocess.Popen([sys.executable, '-c', {spin!r}]) for _ in range(4)]\n"
    code += "[p.wait() for p in ps]\n"
    try:
        cmd = kernel_command([sys.executable, "-c", code], Path("/nonexistent"), Limits(), False, cg.procs_files)
        t0 = time.monotonic()
        subprocess.run(cmd, check=True, timeout=120)
        wall = time.monotonic() - t0
        used = cg.cpu_seconds()
        if used is not None:
            assert 0.5 < used <= 1.1 * wall + 0.2, (used, wall)
        stat = Path(where.parents["cpu"]) / cg.dirs[0].name / "cpu.stat"
        if where.version == 1 and used is not None:  # v2's cpu.stat says it too, as nr_throttled
            throttled = int(dict(line.split() for line in stat.read_text().splitlines())["nr_throttled"])
            # pressed against the cap, the group was throttled; with another job on the cores the
            # spinners may never have reached one CPU, and nothing needed throttling
            assert throttled > 0 or used < 0.9 * wall, (throttled, used, wall)
    finally:
        cg.remove()


# ---- the sandbox's file systems --------------------------------------------------------------------


def test_dev_is_read_only_and_the_disk_is_split_between_tmp_and_shm():
    assert disk_split(256) == (64, 192) and disk_split(0) == (0, 0) and disk_split(1) == (1, 1)
    args = _sandbox_args(sys.executable, Path("/tmp/channel"), Limits(disk_mb=256))
    at = args.index("--remount-ro")
    assert args[at - 2 : at + 2] == ["--dev", "/dev", "--remount-ro", "/dev"]
    assert args[at + 2 : at + 6] == ["--size", str(64 * 2**20), "--tmpfs", "/dev/shm"]
    assert args[at + 6 : at + 10] == ["--size", str(192 * 2**20), "--tmpfs", "/tmp"]
    unsized = _sandbox_args(sys.executable, Path("/tmp/channel"), Limits(disk_mb=0))
    assert "--size" not in unsized and "/dev/shm" in unsized


def test_every_kernel_computes_with_one_blas_thread(monkeypatch):
    """In the sandbox (whose environment starts empty) and without it (where the kernel inherits
    the worker's environment, whatever the instructor's shell set)."""
    assert ONE_THREAD_ENV["OPENBLAS_NUM_THREADS"] == ONE_THREAD_ENV["OMP_NUM_THREADS"] == "1"
    args = _sandbox_args(sys.executable, Path("/tmp/channel"), Limits())
    assert "--clearenv" in args
    set_env = {args[i + 1]: args[i + 2] for i, a in enumerate(args) if a == "--setenv"}
    assert set_env.items() >= ONE_THREAD_ENV.items()
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "8")
    monkeypatch.setenv("OMP_NUM_THREADS", "8")
    assert worker_env().items() >= ONE_THREAD_ENV.items()


def test_no_memory_limit_means_none_inherited():
    """--max-memory 0 lifts the worker's own soft limit in the kernel rather than passing it on
    (with prlimit, and with the Python stand-in that also joins cgroups)."""
    show = [sys.executable, "-c", "import resource; print(resource.getrlimit(resource.RLIMIT_AS)[0])"]
    worker = "import os, resource, sys; resource.setrlimit(resource.RLIMIT_AS, (2**34, -1)); "
    worker += "os.execvp(sys.argv[1], sys.argv[1:])"
    for join in ((), ("/dev/null",)):
        cmd = kernel_command(show, Path("/nonexistent"), Limits(memory_mb=0), False, join)
        out = subprocess.run([sys.executable, "-c", worker, *cmd], capture_output=True, text=True)
        assert out.stdout.strip() == "-1", (join, out.stdout, out.stderr)
        cmd = kernel_command(show, Path("/nonexistent"), Limits(memory_mb=1000), False, join)
        out = subprocess.run([sys.executable, "-c", worker, *cmd], capture_output=True, text=True)
        assert out.stdout.strip() == str(1000 * 2**20), (join, out.stdout, out.stderr)


# ---- what the worker keeps of what a kernel sends ------------------------------------------------


def comm_open(i: int) -> dict:
    state = {"_model_module": "m", "_model_name": "w", "v": "z" * 1000}
    content = {"comm_id": f"c{i}", "target_name": "jupyter.widget", "data": {"state": state, "buffer_paths": []}}
    return {"msg_type": "comm_open", "content": content, "buffers": []}


def test_the_worker_keeps_no_widget_state():
    """nbclient keeps the state of every widget a kernel opens, for as long as it runs (this
    version does: the plain client below); the worker's client keeps none."""
    nb = nbformat.v4.new_notebook()
    plain, ours = NotebookClient(nb), _Client(nb)
    for client in (plain, ours):
        for i in range(3):
            client.handle_comm_msg([], comm_open(i), 0)
    assert len(plain.widget_state) == 3
    assert ours.widget_state == {} and ours.widget_buffers == {} and ours.comm_objects == {}


def test_every_socket_to_a_kernel_refuses_large_messages(tmp_path):
    ctx = capped_context()
    assert ctx is capped_context()
    sock = ctx.socket(zmq.SUB)
    try:
        assert sock.getsockopt(zmq.MAXMSGSIZE) == MAX_KERNEL_MESSAGE_BYTES == 16 * 2**20
        assert sock.getsockopt(zmq.RCVHWM) == MAX_KERNEL_MESSAGES_QUEUED == 8
    finally:
        sock.close()
    km = _KernelManager(kernel_name="python3")
    km.connection_file = str(tmp_path / "c.json")
    assert km.client().context is ctx


def test_a_graded_kernel_starts_without_the_debugger():
    """ipykernel's kernel spec runs ``-m ipykernel_launcher``, which imports debugpy when the
    kernel starts; the worker starts the same kernel with debugpy left out. A kernel spec of
    another form is left as it is."""
    py = sys.executable
    spec = [py, "-Xfrozen_modules=off", "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    assert without_debugger(spec) == [py, "-c", KERNEL_LAUNCHER, "-f", "{connection_file}"]
    assert without_debugger(spec[:1] + spec[2:]) == without_debugger(spec)
    for other in ([py, "-m", "other_kernel", "-f", "{connection_file}"], ["R", "--slave"], []):
        assert without_debugger(other) == other
    code = "import sys; print(sys.modules.get('debugpy', 'absent'), type(get_ipython().kernel).__name__)"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    km = AsyncKernelManager(kernel_name="python3")
    km.kernel_spec.argv = without_debugger([py, *km.kernel_spec.argv[1:]])
    client = NotebookClient(nb, km=km, timeout=120, startup_timeout=120)
    try:
        client.execute()
    finally:
        if client.kc is not None:
            client.kc.stop_channels()
        run_sync(km.shutdown_kernel)(now=True)
    assert nb.cells[0].outputs[0]["text"].split() == ["None", "IPythonKernel"]


PUBLISHER = """
import sys, time, zmq
ctx = zmq.Context()
pub = ctx.socket(zmq.XPUB)  # a PUB socket that also hears its subscribers subscribe
pub.setsockopt(zmq.SNDHWM, 1000)
print(pub.bind_to_random_port("tcp://127.0.0.1"), flush=True)
pub.recv()  # a PUB socket drops what it sends before a subscription arrives
print("subscribed", flush=True)
sys.stdin.readline()
for _ in range(200):
    pub.send(b"x" * 2**20)
print("sent", flush=True)
time.sleep(60)
"""


def _resident_mb() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="reads this process's memory from /proc")
@pytest.mark.parametrize("capped", [True, False])
def test_a_stream_of_messages_not_yet_read_waits_in_the_sender(capped):
    """A kernel (here a publisher, as a kernel's iopub socket is) sends 200 MB in 1 MB messages
    while the worker reads nothing, as a worker on busy cores falls behind: through the capped
    context this process holds a few of them (MAX_KERNEL_MESSAGES_QUEUED, and what the sockets
    buffer), through a plain one all of them; the rest wait in the sender and all arrive later."""
    ctx = capped_context() if capped else zmq.asyncio.Context()
    pub = subprocess.Popen([sys.executable, "-c", PUBLISHER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    sub = ctx.socket(zmq.SUB)
    try:
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(f"tcp://127.0.0.1:{int(pub.stdout.readline())}")
        assert pub.stdout.readline().strip() == "subscribed"  # however long that takes on busy cores
        before = _resident_mb()
        pub.stdin.write("go\n")
        pub.stdin.flush()
        assert pub.stdout.readline().strip() == "sent"
        time.sleep(2)  # what the sockets will take in by themselves, they have
        held = _resident_mb() - before

        async def receive() -> int:
            n = 0
            while n < 200 and await sub.poll(30_000):
                assert len(await sub.recv()) == 2**20
                n += 1
            return n

        received = asyncio.run(receive())
    finally:
        sub.close(linger=0)
        pub.kill()
        pub.wait()
        pub.stdin.close()
        pub.stdout.close()
        if not capped:
            ctx.term()
    assert received == 200
    if capped:
        assert held < 48, held  # 8 messages and the sockets' buffers
    else:
        assert held > 150, held  # the uncapped queue took most of the 200 MB


def test_a_message_past_the_cap_is_never_received():
    """A peer that sends more than MAX_KERNEL_MESSAGE_BYTES in one message is disconnected; the
    message never reaches the worker, and the next small one from a new connection does."""
    ctx = capped_context()
    pull = ctx.socket(zmq.PULL)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    plain = zmq.Context()
    push = plain.socket(zmq.PUSH)
    push.connect(f"tcp://127.0.0.1:{port}")
    try:
        push.send(b"x" * (MAX_KERNEL_MESSAGE_BYTES + 1))
        push.send(b"small")  # on the same connection: dropped with it
        again = plain.socket(zmq.PUSH)
        again.connect(f"tcp://127.0.0.1:{port}")
        again.send(b"after")
        got = []

        async def receive():
            while True:
                if not await pull.poll(2000):
                    return
                got.append(await pull.recv())

        asyncio.run(receive())
        again.close(linger=0)
        assert b"after" in got and all(len(m) <= MAX_KERNEL_MESSAGE_BYTES for m in got), [len(m) for m in got]
    finally:
        push.close(linger=0)
        pull.close(linger=0)
        plain.term()


def test_the_worker_caps_its_own_memory():
    code = (
        "import resource; from nbhelpers.grading.worker import limit_own_memory; limit_own_memory(1024); "
        "print(resource.getrlimit(resource.RLIMIT_AS)[0]); b = bytearray(2 * 2**30)"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.stdout.split()[0] == str(2**30) and "MemoryError" in out.stderr


# ---- what graders no longer running left behind ------------------------------------------------


def test_only_what_graders_no_longer_running_left_is_removed(tmp_path):
    from nbhelpers.grading.jobs import remove_stale

    dead = 2**22 + 12345  # above any pid_max: no such process
    for name in (f"nbgrade-{dead}-abc", f"nbgrade-workers-{dead}-x", f"nbgrade-channels-{dead}-y"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "f").write_text("x")
    kept = [f"nbgrade-{os.getpid()}-mine", "nbgrade-12345678", "nbgrade-abc_1234", "nbgrade-1-init"]
    for name in kept:
        (tmp_path / name).mkdir()
    (tmp_path / f"nbgrade-{dead}-link").symlink_to(tmp_path / kept[0])
    (tmp_path / f"nbgrade-{dead}-file").write_text("a file, not a folder")
    cgroups = tmp_path / "cgroups"
    (cgroups / f"nbgrade-{dead}-cg").mkdir(parents=True)
    (cgroups / f"nbgrade-{os.getpid()}-cg").mkdir()
    gone = remove_stale([tmp_path], [cgroups])
    assert sorted(p.name for p in gone) == sorted(
        [f"nbgrade-{dead}-abc", f"nbgrade-workers-{dead}-x", f"nbgrade-channels-{dead}-y", f"nbgrade-{dead}-cg"]
    )
    assert all((tmp_path / name).is_dir() for name in kept)
    assert (tmp_path / f"nbgrade-{dead}-link").is_symlink() and (tmp_path / f"nbgrade-{dead}-file").is_file()
    assert (cgroups / f"nbgrade-{os.getpid()}-cg").is_dir() and not (cgroups / f"nbgrade-{dead}-cg").exists()
