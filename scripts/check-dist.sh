#!/usr/bin/env bash
# Checks what we ship, as built by java/build.sh (and scripts/native.sh):
#   scripts/check-dist.sh [JAR…]        (default: target/java/harp-rs.jar target/java/harp-rs-examples.jar)
#   * every class in each jar is Java 8 bytecode (class file major 52), so it loads on Java 8 to 25;
#   * each jar carries native/linux-x86_64/libharp_jni.so and native/linux-aarch64/libharp_jni.so,
#     each an ELF shared object for its machine, stripped (no .debug_* sections), needing no
#     glibc symbol version above GLIBC_2.17 (objdump -T);
#   * the harp binaries of target/native/*/ pass the same machine, strip and glibc checks;
#   * the examples jar is at most 16 MB (it is copied into every container of every job);
#   * the glibc check itself rejects a binary that needs more (the host build
#     target/release/harp, linked against this machine's glibc).
# Prints `PASS name` / `FAIL name: why` lines and `check-dist: N failed`; exits 1 on any failure.
set -uo pipefail
cd "$(dirname "$0")/.."
JARS=("$@")
((${#JARS[@]})) || JARS=(target/java/harp-rs.jar target/java/harp-rs-examples.jar)
exec python3 - "${JARS[@]}" <<'PY'
import os, re, subprocess, sys, tempfile, zipfile

MAX_GLIBC = (2, 17)
MAX_JAR = 16 * 1000 * 1000
PLATFORMS = {"linux-x86_64": "X86-64", "linux-aarch64": "AArch64"}
failed = 0


def report(ok, name, why=""):
    global failed
    print(("PASS " if ok else "FAIL ") + name + ("" if ok else ": " + why))
    failed += not ok


def glibc_versions(path):
    out = subprocess.run(["objdump", "-T", path], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError("objdump -T failed: " + out.stderr.strip())
    return sorted({tuple(int(x) for x in v.split(".")) for v in re.findall(r"GLIBC_(\d+(?:\.\d+)+)", out.stdout)})


def elf_problems(path, machine):
    """Why `path` is not a stripped `machine` ELF needing at most GLIBC_2.17 (empty: it is), and
    the glibc versions it needs."""
    problems = []
    hdr = subprocess.run(["readelf", "-h", "-S", "-W", path], capture_output=True, text=True)
    if hdr.returncode != 0:
        return ["not an ELF file: " + hdr.stderr.strip()[:200]], []
    m = re.search(r"Machine:\s+(.*)", hdr.stdout)
    found = m.group(1).strip() if m else "?"
    if machine not in found:
        problems.append(f"machine {found!r}, expected {machine}")
    # .debug_gdb_scripts is not debug info: a few bytes naming Rust's gdb pretty-printers, loaded
    # with the program, which strip keeps.
    debug = sorted(set(re.findall(r"\s(\.debug_\w+)\s", hdr.stdout)) - {".debug_gdb_scripts"})
    if debug:
        problems.append("not stripped: " + ", ".join(debug[:4]))
    try:
        vs = glibc_versions(path)
    except RuntimeError as e:
        return problems + [str(e)], []
    too_new = [v for v in vs if v > MAX_GLIBC]
    if too_new:
        problems.append("needs " + ", ".join("GLIBC_" + ".".join(map(str, v)) for v in too_new))
    return problems, vs


def glibc_floor(vs):
    return "GLIBC_" + ".".join(map(str, max(vs))) if vs else "no versioned glibc symbol"


for jar in sys.argv[1:]:
    if not os.path.isfile(jar):
        report(False, jar, "missing (build it with java/build.sh)")
        continue
    with zipfile.ZipFile(jar) as z:
        classes = [n for n in z.namelist() if n.endswith(".class")]
        majors = {}
        for n in classes:
            b = z.read(n)
            major = int.from_bytes(b[6:8], "big") if b[:4] == b"\xca\xfe\xba\xbe" else -1
            majors.setdefault(major, []).append(n)
        report(bool(classes) and set(majors) == {52}, f"{jar}: {len(classes)} classes are Java 8 bytecode (major 52)",
               "majors " + ", ".join(f"{m} ({v[0]}…)" for m, v in sorted(majors.items())))
        for platform, machine in PLATFORMS.items():
            entry = f"native/{platform}/libharp_jni.so"
            if entry not in z.namelist():
                report(False, f"{jar}: {entry}", "not in the jar")
                continue
            with tempfile.NamedTemporaryFile(suffix=".so") as t:
                t.write(z.read(entry))
                t.flush()
                problems, vs = elf_problems(t.name, machine)
                report(not problems, f"{jar}: {entry} is a stripped {machine} library needing at most GLIBC_2.17 "
                       f"({glibc_floor(vs)})", "; ".join(problems))
    if jar.endswith("examples.jar"):
        size = os.path.getsize(jar)
        report(size <= MAX_JAR, f"{jar}: {size / 1e6:.1f} MB, at most 16 MB", f"{size / 1e6:.1f} MB")

for platform, machine in PLATFORMS.items():
    path = f"target/native/{platform}/harp"
    if not os.path.isfile(path):
        report(False, path, "missing (scripts/native.sh)")
        continue
    problems, _ = elf_problems(path, machine)
    report(not problems, f"{path} is a stripped {machine} executable needing at most GLIBC_2.17", "; ".join(problems))

# The negative control: the host build of harp (java/build.sh makes it; linked against this
# machine's glibc) must be rejected, so the check cannot pass by accident. Skipped only on a
# build machine whose own glibc is 2.17 or older.
host = "target/release/harp"
if not os.path.isfile(host):
    report(False, host, "missing (java/build.sh)")
else:
    problems, vs = elf_problems(host, "X86-64")
    if max(vs, default=(0,)) > MAX_GLIBC:
        report(any("needs GLIBC_" in p for p in problems),
               f"the glibc check rejects the host build {host} ({glibc_floor(vs)})", "it was accepted")

print(f"check-dist: {failed} failed")
sys.exit(1 if failed else 0)
PY
