# shell-stats: counts lines, words and bytes of the `text` input.
#
# /airlock/input.json is compact JSON written by airlock; this worker has one
# input, so it is {"text":"..."} on one line. A tiny awk decoder for that one
# JSON string keeps the worker to POSIX tools; anything richer wants python3
# or node.
set -eu

in=/airlock/input.json
out=/airlock/output
text=$(mktemp)
trap 'rm -f "$text"' EXIT

awk '
{
    start = index($0, "\"text\":\"")
    if (start == 0) { print "input.json has no text" > "/dev/stderr"; exit 1 }
    s = substr($0, start + 8)
    n = length(s)
    for (i = 1; i <= n; i++) {
        c = substr(s, i, 1)
        if (c == "\"") break
        if (c != "\\") { printf "%s", c; continue }
        i++
        e = substr(s, i, 1)
        if (e == "n") printf "\n"
        else if (e == "t") printf "\t"
        else if (e == "r") printf "\r"
        else if (e == "b" || e == "f") printf " "
        else if (e == "u") { printf "?"; i += 4 }
        else printf "%s", e
    }
}' "$in" > "$text"

lines=$(awk 'END { print NR }' "$text")
words=$(wc -w < "$text" | tr -d ' ')
bytes=$(wc -c < "$text" | tr -d ' ')

printf 'lines %s\nwords %s\nbytes %s\n' "$lines" "$words" "$bytes" > "$out/stats.txt"
printf '{"lines": %s, "words": %s, "bytes": %s}\n' "$lines" "$words" "$bytes" > "$out/result.json"
echo "counted $bytes bytes"
