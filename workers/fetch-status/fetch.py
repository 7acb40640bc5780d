"""fetch-status: one HTTPS request through the sandbox's egress proxy.

The sandbox has no network of its own; airlock sets HTTPS_PROXY to its
per-run proxy, and urllib's default opener honours it. Only api.github.com
is allowed by this worker's [egress] section.
"""

import json
import urllib.request

URL = "https://api.github.com/zen"


def main() -> None:
    request = urllib.request.Request(URL, headers={"User-Agent": "airlock-example"})
    with urllib.request.urlopen(request, timeout=15) as response:
        status = response.status
        zen = response.read(1000).decode("utf-8", "replace").strip()
    with open("/airlock/output/result.json", "w", encoding="utf-8") as f:
        json.dump({"zen": zen, "status": status}, f)
    print(f"GET {URL} -> {status}")


if __name__ == "__main__":
    main()
