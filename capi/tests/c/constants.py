#!/usr/bin/env python3
"""Writes a C program that checks every constant of UCX's public ucp and ucs headers (the
enum values and integer macros reachable from <ucp/api/ucp.h>) against the value rucx uses,
through rucx_ucp_constant(). The list is taken from the headers at test time:

    constants.py INCLUDE_DIR OUT.c
"""
import re
import subprocess
import sys

inc, out = sys.argv[1], sys.argv[2]
src = "#include <ucp/api/ucp.h>\n"
cpp = ["gcc", "-E", "-I", inc, "-"]
pre = subprocess.run(cpp + ["-P"], input=src, capture_output=True, text=True, check=True).stdout
names = []
for body in re.findall(r"enum\s*\w*\s*\{([^}]*)\}", pre):
    for item in body.split(","):
        n = item.split("=")[0].strip()
        if re.fullmatch(r"(UCP|UCS)_\w+", n):
            names.append(n)
macros = subprocess.run(cpp + ["-dM"], input=src, capture_output=True, text=True, check=True).stdout
for line in macros.splitlines():
    m = re.match(r"#define ((?:UCP|UCS)_[A-Z0-9_]+) (.+)$", line)
    if not m or m.group(1).endswith("_H_") or m.group(1).endswith("_H"):
        continue
    if re.fullmatch(r"[\s()0-9xXa-fA-FuUlL<>|+\-*~A-Z_]+", m.group(2)):
        names.append(m.group(1))
# The header's own API version is the client's, not the library's.
skip = {"UCP_API_MINOR", "UCP_API_VERSION"}
seen = []
for n in names:
    if n not in seen and n not in skip:
        seen.append(n)
with open(out, "w") as f:
    f.write("""#include <ucp/api/ucp.h>
#include <stdint.h>
#include <stdio.h>
int rucx_ucp_constant(const char *name, unsigned api_minor, int64_t *value);
static int n_checked, n_wrong;
static void check(const char *name, int64_t header)
{
    int64_t rucx;
    n_checked++;
    if (!rucx_ucp_constant(name, UCP_API_MINOR, &rucx)) {
        printf("MISSING %s (header: %lld)\\n", name, (long long)header);
        n_wrong++;
    } else if (rucx != header) {
        printf("DIFFERS %s: header %lld, rucx %lld\\n", name, (long long)header, (long long)rucx);
        n_wrong++;
    }
}
#define C(x) check(#x, (int64_t)(uintptr_t)(x))
int main(void)
{
""")
    for n in seen:
        f.write(f"    C({n});\n")
    f.write("""    printf("constants: %d of UCX %d.%d's headers checked, %d wrong\\n", n_checked,
           UCP_API_MAJOR, UCP_API_MINOR, n_wrong);
    return n_wrong != 0;
}
""")
