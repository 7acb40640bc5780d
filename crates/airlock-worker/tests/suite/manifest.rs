//! RUN-1: the manifest schema. Every field, every refusal, each message
//! naming its field path; positive controls prove the checks can pass.

use airlock_worker::{
    Autonomy, Manifest, ManifestError, Runtime, SecretDelivery, Tool, Trigger, WebhookFormat,
    WorkerKind,
};
use serde_json::json;

use super::{
    AGENT_SECTION, AGENT_WORKER, SCRIPT_WORKER, agent, assert_problem, parse_ok, script, worker,
};

fn w(overrides: &[(&str, Option<&str>)]) -> String {
    worker(SCRIPT_WORKER, overrides)
}

fn aw(overrides: &[(&str, Option<&str>)]) -> String {
    format!("{}{AGENT_SECTION}", worker(AGENT_WORKER, overrides))
}

/// (label, manifest text, field path, message fragment). One case per line,
/// so the table reads as a list.
#[rustfmt::skip]
fn refusal_table() -> Vec<(&'static str, String, &'static str, &'static str)> {
    let long_id = format!("\"{}\"", "a".repeat(64));
    let long_secret = script(&format!("[secrets]\nnames = [\"{}\"]\n", "A".repeat(65)));
    vec![
        // --- [worker]
        ("no worker section", "idempotent = true\n".into(), "worker", "missing required section"),
        ("worker id missing", w(&[("id", None)]), "worker.id", "missing required field"),
        ("worker id uppercase", w(&[("id", Some("\"Demo\""))]), "worker.id", "not a valid worker id"),
        ("worker id underscore", w(&[("id", Some("\"de_mo\""))]), "worker.id", "expected [a-z0-9][a-z0-9-]{0,62}"),
        ("worker id leading dash", w(&[("id", Some("\"-demo\""))]), "worker.id", "not a valid worker id"),
        ("worker id 64 chars", w(&[("id", Some(&long_id))]), "worker.id", "not a valid worker id"),
        ("worker id wrong type", w(&[("id", Some("7"))]), "worker.id", "invalid type: integer `7`, expected a string"),
        ("title missing", w(&[("title", None)]), "worker.title", "missing required field"),
        ("title blank", w(&[("title", Some("\"  \""))]), "worker.title", "must not be empty"),
        ("title newline", w(&[("title", Some("\"a\\nb\""))]), "worker.title", "control character"),
        ("title too long", w(&[("title", Some(&format!("\"{}\"", "t".repeat(121))))]), "worker.title", "longer than 120 characters"),
        ("description too long", w(&[("description", Some(&format!("\"{}\"", "d".repeat(4001))))]), "worker.description", "longer than 4000"),
        ("kind missing", w(&[("kind", None)]), "worker.kind", "missing required field"),
        ("kind unknown", w(&[("kind", Some("\"daemon\""))]), "worker.kind", "unknown kind \"daemon\" (expected script or agent)"),
        ("entry missing", w(&[("entry", None)]), "worker.entry", "missing required field"),
        ("entry empty", w(&[("entry", Some("\"\""))]), "worker.entry", "must not be empty"),
        ("entry absolute", w(&[("entry", Some("\"/etc/passwd\""))]), "worker.entry", "absolute path"),
        ("entry dot-dot", w(&[("entry", Some("\"../main.py\""))]), "worker.entry", "\"..\" component"),
        ("entry inner dot-dot", w(&[("entry", Some("\"src/../../main.py\""))]), "worker.entry", "\"..\" component"),
        ("entry dot", w(&[("entry", Some("\"./main.py\""))]), "worker.entry", "not a plain relative path"),
        ("entry double slash", w(&[("entry", Some("\"src//main.py\""))]), "worker.entry", "not a plain relative path"),
        ("entry backslash", w(&[("entry", Some("'src\\main.py'"))]), "worker.entry", "backslash"),
        ("runtime missing", w(&[("runtime", None)]), "worker.runtime", "missing required field"),
        ("runtime unknown", w(&[("runtime", Some("\"ruby\""))]), "worker.runtime", "unknown runtime \"ruby\" (expected python3, node, bash, sh or native)"),
        ("unknown worker field", w(&[("colour", Some("\"red\""))]), "worker.colour", "unknown field (expected one of id, title"),
        ("unknown top-level field", format!("colour = 1\n{}", w(&[])), "colour", "unknown field (expected one of worker"),
        ("agent section on a script", format!("{}{AGENT_SECTION}", w(&[])), "agent", "only allowed when worker.kind = \"agent\""),
        ("idempotent wrong type", format!("idempotent = \"yes\"\n{}", w(&[])), "idempotent", "expected a boolean"),
        // --- agents
        ("agent section missing", worker(AGENT_WORKER, &[]), "agent", "missing required section"),
        ("agent with runtime", aw(&[("runtime", Some("\"python3\""))]), "worker.runtime", "only allowed for script workers"),
        ("agent entry not a prompt", aw(&[("entry", Some("\"prompt.md\""))]), "worker.entry", "must be AGENT.md or SKILL.md"),
        ("agent model missing", format!("{}[agent]\ntools = []\nautonomy = \"ask-writes\"\n", worker(AGENT_WORKER, &[])), "agent.model", "missing required field"),
        ("agent model with space", agent("").replace("\"gpt-4o-mini\"", "\"gpt 4\""), "agent.model", "must name a model profile"),
        ("agent model upper case", agent("").replace("\"gpt-4o-mini\"", "\"GPT\""), "agent.model", "must name a model profile"),
        ("agent channel is gone", agent("").replace("autonomy", "channel = \"openai\"\nautonomy"), "agent.channel", "unknown field"),
        ("agent unknown tool", agent("").replace("\"finish\"]", "\"finish\", \"rm_rf\"]"), "agent.tools[2]", "unknown tool \"rm_rf\""),
        ("agent tool twice", agent("").replace("\"finish\"]", "\"finish\", \"finish\"]"), "agent.tools[2]", "listed twice"),
        ("agent tools missing", agent("").replace("tools = [\"read_file\", \"finish\"]\n", ""), "agent.tools", "missing required field"),
        ("agent autonomy unknown", agent("").replace("\"ask-writes\"", "\"yolo\""), "agent.autonomy", "unknown autonomy \"yolo\" (expected read-only, ask-all, ask-writes or auto-within-policy)"),
        ("agent autonomy old name", agent("").replace("\"ask-writes\"", "\"auto\""), "agent.autonomy", "unknown autonomy \"auto\""),
        ("agent autonomy missing", agent("").replace("autonomy = \"ask-writes\"\n", ""), "agent.autonomy", "missing required field"),
        ("agent approval ttl zero", agent("").replace("autonomy", "approval_ttl_s = 0\nautonomy"), "agent.approval_ttl_s", "out of range"),
        ("agent tool output too large", agent("").replace("autonomy", "tool_output_bytes = 1048577\nautonomy"), "agent.tool_output_bytes", "out of range"),
        ("budget tool calls zero", agent("[agent.budgets]\ntool_calls = 0\n"), "agent.budgets.tool_calls", "out of range (expected 1 to 10000)"),
        ("agent unknown field", agent("").replace("autonomy", "temperature = 1\nautonomy"), "agent.temperature", "unknown field"),
        ("budget steps zero", agent("[agent.budgets]\nsteps = 0\n"), "agent.budgets.steps", "out of range (expected 1 to 10000)"),
        ("rule allows an interpreter", agent("[[agent.rules]]\ntool = \"run_command\"\nverdict = \"allow\"\nargv_prefix = [\"sh\"]\n"), "agent.rules[0].argv_prefix", "would allow anything"),
        ("rule argv on a file tool", agent("[[agent.rules]]\ntool = \"read_file\"\nverdict = \"deny\"\nargv_prefix = [\"ls\"]\n"), "agent.rules[0].argv_prefix", "is for run_command rules"),
        ("rule path escapes", agent("[[agent.rules]]\ntool = \"write_file\"\nverdict = \"allow\"\npath_prefix = \"../etc\"\n"), "agent.rules[0].path_prefix", "relative folder"),
        ("rule host upper case", agent("[[agent.rules]]\ntool = \"http_request\"\nverdict = \"allow\"\nhost = \"API.example.com\"\n"), "agent.rules[0].host", "lower case"),
        ("rule two matchers", agent("[[agent.rules]]\ntool = \"http_request\"\nverdict = \"allow\"\nhost = \"a.example\"\npath_prefix = \"x\"\n"), "agent.rules[0]", "at most one"),
        ("rule verdict unknown", agent("[[agent.rules]]\ntool = \"finish\"\nverdict = \"maybe\"\n"), "agent.rules[0].verdict", "unknown verdict"),
        ("rule unknown field", agent("[[agent.rules]]\ntool = \"finish\"\nverdict = \"deny\"\nwhy = 1\n"), "agent.rules[0].why", "unknown field"),
        ("budget tokens too many", agent("[agent.budgets]\ntokens = 100000001\n"), "agent.budgets.tokens", "out of range"),
        ("budget cost negative", agent("[agent.budgets]\ncost_usd = -1.0\n"), "agent.budgets.cost_usd", "out of range"),
        ("budget wall time", agent("[agent.budgets]\nwall_time_s = 86401\n"), "agent.budgets.wall_time_s", "out of range"),
        ("budget egress bytes", agent("[agent.budgets]\negress_bytes = -5\n"), "agent.budgets.egress_bytes", "out of range"),
        ("budget unknown field", agent("[agent.budgets]\nretries = 3\n"), "agent.budgets.retries", "unknown field"),
        ("agent with secrets", agent("[secrets]\nnames = [\"GITHUB_TOKEN\"]\n"), "secrets.names", "agent workers never receive secrets"),
        // --- [inputs.NAME]
        ("input bad name", script("[inputs.Count]\ntype = \"number\"\n"), "inputs.Count", "not a valid field name"),
        ("input name too long", script(&format!("[inputs.{}]\ntype = \"number\"\n", "n".repeat(65))), "inputs.nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn", "not a valid field name"),
        ("input type missing", script("[inputs.count]\ndescription = \"x\"\n"), "inputs.count.type", "missing required field"),
        ("input type wrong toml type", script("[inputs.count]\ntype = 5\n"), "inputs.count.type", "expected a string"),
        ("input not a table", script("[inputs]\ncount = 5\n"), "inputs.count", "expected a table"),
        ("input unknown field", script("[inputs.count]\ntype = \"number\"\ncolour = 1\n"), "inputs.count.colour", "unknown field (expected one of type, required, default, enum"),
        ("minimum on string", script("[inputs.s]\ntype = \"string\"\nminimum = 1\n"), "inputs.s.minimum", "only allowed for type number"),
        ("maximum not a number", script("[inputs.n]\ntype = \"number\"\nmaximum = \"9\"\n"), "inputs.n.maximum", "expected a finite number, got a string"),
        ("minimum above maximum", script("[inputs.n]\ntype = \"number\"\nminimum = 5\nmaximum = 1.5\n"), "inputs.n.minimum", "5 is above maximum 1.5"),
        ("enum outside the bounds", script("[inputs.n]\ntype = \"number\"\nmaximum = 3\nenum = [1, 4]\n"), "inputs.n.enum[1]", "outside minimum and maximum"),
        ("default below the minimum", script("[inputs.n]\ntype = \"number\"\nminimum = 0\ndefault = -1\n"), "inputs.n.default", "below the minimum 0"),
        ("enum on boolean", script("[inputs.flag]\ntype = \"boolean\"\nenum = [true]\n"), "inputs.flag.enum", "only allowed for type string or number"),
        ("max_length on number", script("[inputs.n]\ntype = \"number\"\nmax_length = 3\n"), "inputs.n.max_length", "only allowed for type string"),
        ("max_bytes on string", script("[inputs.s]\ntype = \"string\"\nmax_bytes = 3\n"), "inputs.s.max_bytes", "only allowed for type json or file"),
        ("max_length zero", script("[inputs.s]\ntype = \"string\"\nmax_length = 0\n"), "inputs.s.max_length", "out of range (expected 1 to 1048576)"),
        ("max_bytes json too big", script("[inputs.j]\ntype = \"json\"\nmax_bytes = 1048577\n"), "inputs.j.max_bytes", "out of range"),
        ("max_bytes file too big", script("[inputs.f]\ntype = \"file\"\nmax_bytes = 1073741825\n"), "inputs.f.max_bytes", "out of range (expected 1 to 1073741824)"),
        ("empty enum", script("[inputs.s]\ntype = \"string\"\nenum = []\n"), "inputs.s.enum", "at least one value"),
        ("enum item wrong type", script("[inputs.s]\ntype = \"string\"\nenum = [\"a\", 1]\n"), "inputs.s.enum[1]", "expected a string, got a number"),
        ("number enum item wrong type", script("[inputs.n]\ntype = \"number\"\nenum = [1, \"2\"]\n"), "inputs.n.enum[1]", "expected a finite number"),
        ("enum item twice", script("[inputs.s]\ntype = \"string\"\nenum = [\"a\", \"a\"]\n"), "inputs.s.enum[1]", "listed twice"),
        ("enum item longer than max_length", script("[inputs.s]\ntype = \"string\"\nmax_length = 2\nenum = [\"abc\"]\n"), "inputs.s.enum[0]", "longer than max_length 2"),
        ("default wrong type", script("[inputs.n]\ntype = \"number\"\ndefault = \"1\"\n"), "inputs.n.default", "expected a number, got a string"),
        ("default not in enum", script("[inputs.s]\ntype = \"string\"\nenum = [\"a\"]\ndefault = \"b\"\n"), "inputs.s.default", "is not one of \"a\""),
        ("default too long", script("[inputs.s]\ntype = \"string\"\nmax_length = 2\ndefault = \"abc\"\n"), "inputs.s.default", "longer than 2 characters"),
        ("default json too big", script("[inputs.j]\ntype = \"json\"\nmax_bytes = 4\ndefault = [1, 2, 3]\n"), "inputs.j.default", "larger than 4 bytes"),
        ("default datetime", script("[inputs.s]\ntype = \"json\"\ndefault = 1979-05-27\n"), "inputs.s.default", "datetimes are not supported"),
        ("default nan", script("[inputs.n]\ntype = \"number\"\ndefault = nan\n"), "inputs.n.default", "not a finite number"),
        ("required with default", script("[inputs.n]\ntype = \"number\"\nrequired = true\ndefault = 1\n"), "inputs.n.required", "cannot have a default"),
        ("file input default", script("[inputs.f]\ntype = \"file\"\ndefault = \"x\"\n"), "inputs.f.default", "file inputs cannot have a default"),
        ("input description control char", script("[inputs.s]\ntype = \"string\"\ndescription = \"a\\u0007\"\n"), "inputs.s.description", "control character"),
        ("unknown type", script("[inputs.count]\ntype = \"integer\"\n"), "inputs.count.type", "unknown type \"integer\" (expected string, number, boolean, json or file)"),
        // --- [outputs.NAME]
        ("output unknown type", script("[outputs.x]\ntype = \"blob\"\n"), "outputs.x.type", "unknown type \"blob\""),
        ("file output without path", script("[outputs.report]\ntype = \"file\"\n"), "outputs.report.path", "missing required field"),
        ("path on a string output", script("[outputs.s]\ntype = \"string\"\npath = \"s.txt\"\n"), "outputs.s.path", "only allowed for type file"),
        ("output path dot-dot", script("[outputs.r]\ntype = \"file\"\npath = \"../r.txt\"\n"), "outputs.r.path", "\"..\" component"),
        ("output path absolute", script("[outputs.r]\ntype = \"file\"\npath = \"/etc/passwd\"\n"), "outputs.r.path", "absolute path"),
        ("output path result.json", script("[outputs.r]\ntype = \"file\"\npath = \"result.json\"\n"), "outputs.r.path", "reserved"),
        ("output path twice", script("[outputs.a]\ntype = \"file\"\npath = \"x.txt\"\n[outputs.b]\ntype = \"file\"\npath = \"x.txt\"\n"), "outputs.b.path", "also the path of outputs.a"),
        ("output default", script("[outputs.s]\ntype = \"string\"\ndefault = \"x\"\n"), "outputs.s.default", "unknown field"),
        ("output bad name", script("[outputs.Out]\ntype = \"string\"\n"), "outputs.Out", "not a valid field name"),
        // --- [limits]
        ("timeout zero", script("[limits]\ntimeout_s = 0\n"), "limits.timeout_s", "out of range (expected 1 to 86400)"),
        ("timeout too long", script("[limits]\ntimeout_s = 86401\n"), "limits.timeout_s", "out of range"),
        ("timeout negative", script("[limits]\ntimeout_s = -1\n"), "limits.timeout_s", "-1 is out of range"),
        ("timeout wrong type", script("[limits]\ntimeout_s = \"10\"\n"), "limits.timeout_s", "expected an integer"),
        ("memory too big", script("[limits]\nmemory_mb = 65537\n"), "limits.memory_mb", "out of range (expected 1 to 65536)"),
        ("pids zero", script("[limits]\npids = 0\n"), "limits.pids", "out of range"),
        ("cpus zero", script("[limits]\ncpus = 0.0\n"), "limits.cpus", "out of range (expected 0.01 to 64)"),
        ("cpus too many", script("[limits]\ncpus = 65\n"), "limits.cpus", "out of range"),
        ("output bytes too big", script("[limits]\noutput_bytes = 1073741825\n"), "limits.output_bytes", "out of range"),
        ("disk zero", script("[limits]\ndisk_mb = 0\n"), "limits.disk_mb", "out of range"),
        ("limits unknown field", script("[limits]\nswap_mb = 1\n"), "limits.swap_mb", "unknown field (expected one of timeout_s"),
        // --- [egress]
        ("allow star", script("[egress]\nallow = [\"*\"]\n"), "egress.allow[0]", "would allow every host"),
        ("allow star with port", script("[egress]\nallow = [\"*:443\"]\n"), "egress.allow[0]", "would allow every host"),
        ("allow tld", script("[egress]\nallow = [\"*.com\"]\n"), "egress.allow[0]", "whole top-level domain"),
        ("allow empty", script("[egress]\nallow = [\"\"]\n"), "egress.allow[0]", "empty rule"),
        ("allow whitespace", script("[egress]\nallow = [\"api .example.com\"]\n"), "egress.allow[0]", "whitespace"),
        ("allow https scheme", script("[egress]\nallow = [\"https://api.example.com\"]\n"), "egress.allow[0]", "scheme \"https\" is not allowed"),
        ("allow port zero", script("[egress]\nallow = [\"api.example.com:0\"]\n"), "egress.allow[0]", "invalid port"),
        ("allow port too big", script("[egress]\nallow = [\"api.example.com:65536\"]\n"), "egress.allow[0]", "invalid port"),
        ("allow inner star", script("[egress]\nallow = [\"api.*.example.com\"]\n"), "egress.allow[0]", "only allowed as a leading \"*.\" label"),
        ("allow path", script("[egress]\nallow = [\"api.github.com/zen\"]\n"), "egress.allow[0]", "paths are not allowed"),
        ("allow twice", script("[egress]\nallow = [\"a.example.com\", \"a.example.com\"]\n"), "egress.allow[1]", "listed twice"),
        ("allow wrong type", script("[egress]\nallow = [\"a.example.com\", 5]\n"), "egress.allow[1]", "expected a string"),
        ("channel bad name", script("[egress]\nchannels = [\"OpenAI\"]\n"), "egress.channels[0]", "not a valid channel name"),
        ("channel twice", script("[egress]\nchannels = [\"openai\", \"openai\"]\n"), "egress.channels[1]", "listed twice"),
        ("egress unknown field", script("[egress]\ndeny = [\"x.com\"]\n"), "egress.deny", "unknown field (expected one of allow or channels)"),
        // --- [secrets]
        ("secret lowercase", script("[secrets]\nnames = [\"github_token\"]\n"), "secrets.names[0]", "not a valid secret name"),
        ("secret 65 chars", long_secret, "secrets.names[0]", "expected [A-Z][A-Z0-9_]{0,63}"),
        ("secret AIRLOCK_ prefix", script("[secrets]\nnames = [\"AIRLOCK_X\"]\n"), "secrets.names[0]", "reserved for the platform"),
        ("secret platform-owned", script("[secrets]\nnames = [\"DATABASE_URL\"]\n"), "secrets.names[0]", "reserved for the platform"),
        ("secret KEK", script("[secrets]\nnames = [\"OK\", \"KEK\"]\n"), "secrets.names[1]", "reserved for the platform"),
        ("secret twice", script("[secrets]\nnames = [\"A\", \"A\"]\n"), "secrets.names[1]", "listed twice"),
        ("secret delivery unknown", script("[secrets]\ndelivery = \"stdin\"\n"), "secrets.delivery", "unknown delivery \"stdin\" (expected file or env)"),
        ("secrets unknown field", script("[secrets]\nvalues = []\n"), "secrets.values", "unknown field"),
        // --- [[triggers]]
        ("trigger kind missing", script("[[triggers]]\ncron = \"* * * * *\"\n"), "triggers[0].kind", "missing required field"),
        ("trigger kind unknown", script("[[triggers]]\nkind = \"cron\"\n"), "triggers[0].kind", "unknown trigger kind \"cron\" (expected manual, schedule or webhook)"),
        ("schedule without cron", script("[[triggers]]\nkind = \"schedule\"\ntimezone = \"UTC\"\n"), "triggers[0].cron", "missing required field"),
        ("schedule bad cron", script("[[triggers]]\nkind = \"manual\"\n[[triggers]]\nkind = \"schedule\"\ncron = \"61 * * * *\"\ntimezone = \"UTC\"\n"), "triggers[1].cron", "minute value \"61\" is out of range 0-59"),
        ("schedule six fields", script("[[triggers]]\nkind = \"schedule\"\ncron = \"0 * * * * *\"\ntimezone = \"UTC\"\n"), "triggers[0].cron", "has 6 fields (expected 5"),
        ("schedule without timezone", script("[[triggers]]\nkind = \"schedule\"\ncron = \"0 9 * * *\"\n"), "triggers[0].timezone", "missing required field"),
        ("schedule bad timezone", script("[[triggers]]\nkind = \"schedule\"\ncron = \"0 9 * * *\"\ntimezone = \"Mars/Olympus\"\n"), "triggers[0].timezone", "not a time zone"),
        ("schedule input unknown key", script("[[triggers]]\nkind = \"schedule\"\ncron = \"0 9 * * *\"\ntimezone = \"UTC\"\ninput = { colour = \"red\" }\n"), "triggers[0].input", "unknown input"),
        ("schedule input wrong type", script("[inputs.n]\ntype = \"number\"\n[[triggers]]\nkind = \"schedule\"\ncron = \"0 9 * * *\"\ntimezone = \"UTC\"\ninput = { n = \"x\" }\n"), "triggers[0].input", "inputs.n: expected a number"),
        ("cron on a manual trigger", script("[[triggers]]\nkind = \"manual\"\ncron = \"* * * * *\"\n"), "triggers[0].cron", "only allowed for schedule triggers"),
        ("format on a schedule", script("[[triggers]]\nkind = \"schedule\"\ncron = \"* * * * *\"\ntimezone = \"UTC\"\nformat = \"github\"\n"), "triggers[0].format", "only allowed for webhook triggers"),
        ("webhook format unknown", script("[[triggers]]\nkind = \"webhook\"\nformat = \"gitlab\"\n"), "triggers[0].format", "unknown webhook format \"gitlab\" (expected standard, github, slack or stripe)"),
        ("two webhooks", script("[[triggers]]\nkind = \"webhook\"\n[[triggers]]\nkind = \"webhook\"\n"), "triggers[1].kind", "already declared"),
        ("two manual triggers", script("[[triggers]]\nkind = \"manual\"\n[[triggers]]\nkind = \"manual\"\n"), "triggers[1].kind", "already declared"),
        ("trigger unknown field", script("[[triggers]]\nkind = \"manual\"\nenabled = true\n"), "triggers[0].enabled", "unknown field"),
        ("empty trigger list", format!("triggers = []\n{}", w(&[])), "triggers", "empty list"),
        // --- [approvals]
        ("approval reason without required", script("[approvals]\nreason = \"spends money\"\n"), "approvals.reason", "only allowed when approvals.required = true"),
        ("approvals unknown field", script("[approvals]\nrequired = true\napprovers = [\"bob\"]\n"), "approvals.approvers", "unknown field"),
        ("approvals wrong type", script("[approvals]\nrequired = \"yes\"\n"), "approvals.required", "expected a boolean"),
        ("approval ttl without required", script("[approvals]\nttl_s = 60\n"), "approvals.ttl_s", "only allowed when approvals.required = true"),
        ("approval ttl zero", script("[approvals]\nrequired = true\nttl_s = 0\n"), "approvals.ttl_s", "0 is out of range (expected 1 to 604800)"),
        ("approval ttl over a week", script("[approvals]\nrequired = true\nttl_s = 604801\n"), "approvals.ttl_s", "604801 is out of range (expected 1 to 604800)"),
        ("approval ttl wrong type", script("[approvals]\nrequired = true\nttl_s = \"1h\"\n"), "approvals.ttl_s", "expected"),
    ]
}

#[test]
fn run_1_every_invalid_field_is_refused_with_its_path() {
    let table = refusal_table();
    assert!(table.len() > 100);
    for (label, text, field, fragment) in table {
        let err = match Manifest::from_toml(&text) {
            Ok(_) => panic!("{label}: expected a refusal\n---\n{text}"),
            Err(e) => e,
        };
        assert_eq!(err.code(), "manifest_invalid", "{label}: {err}");
        assert_problem(&err, field, fragment, label);
    }
}

#[test]
fn run_1_unknown_type_message_is_exact() {
    let err = Manifest::from_toml(&script("[inputs.count]\ntype = \"integer\"\n")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "inputs.count.type: unknown type \"integer\" (expected string, number, boolean, json or file)"
    );
}

#[test]
fn run_1_all_problems_are_reported_at_once() {
    let text = format!(
        "{}[limits]\ntimeout_s = 0\n[secrets]\nnames = [\"AIRLOCK_KEY\"]\n",
        w(&[("id", Some("\"Bad\"")), ("runtime", Some("\"ruby\""))])
    );
    let err = Manifest::from_toml(&text).unwrap_err();
    let fields: Vec<String> = err.problems().into_iter().map(|p| p.field).collect();
    assert_eq!(
        fields,
        [
            "worker.id",
            "worker.runtime",
            "limits.timeout_s",
            "secrets.names[0]"
        ]
    );
}

#[test]
fn run_1_toml_syntax_error_names_line_and_column() {
    let err = Manifest::from_toml("[worker]\nid = \"demo\"\ntitle = \n").unwrap_err();
    assert_eq!(err.code(), "manifest_syntax");
    let ManifestError::Syntax { line, column, .. } = &err else {
        panic!("expected a syntax error, got {err:?}");
    };
    assert_eq!((*line, *column), (3, 9));
    assert!(
        err.to_string()
            .starts_with("worker.toml is not valid TOML (line 3, column 9)")
    );
}

#[test]
fn run_1_oversized_manifest_is_refused_before_parsing() {
    let text = format!("{}# {}\n", script(""), "x".repeat(256 * 1024));
    let err = Manifest::from_toml(&text).unwrap_err();
    assert!(
        err.to_string().contains("larger than 262144 bytes"),
        "{err}"
    );
}

#[test]
fn run_1_minimal_script_manifest_gets_documented_defaults() {
    let m = parse_ok(&script(""));
    assert_eq!(
        serde_json::to_value(&m).unwrap(),
        json!({
            "id": "demo",
            "title": "Demo",
            "description": "",
            "kind": "script",
            "runtime": "python3",
            "entry": "main.py",
            "inputs": {},
            "outputs": {},
            "limits": {
                "timeout_s": 300, "memory_mb": 512, "pids": 256, "cpus": 1.0,
                "output_bytes": 10485760, "disk_mb": 1024, "concurrency": 4
            },
            "egress": { "allow": [], "channels": [] },
            "secrets": { "names": [], "delivery": "file" },
            "triggers": [ { "kind": "manual" } ],
            "approvals": { "required": false },
            "idempotent": false
        })
    );
}

#[test]
fn run_1_full_script_manifest_parses_into_typed_values() {
    let text = r#"
idempotent = true

[worker]
id = "report-2"
title = "Weekly report"
description = """
Builds the weekly report.
Second line."""
kind = "script"
entry = "bin/report"
runtime = "native"

[inputs.team]
type = "string"
enum = ["core", "web"]
description = "Which team"

[inputs.weeks]
type = "number"
default = 1
enum = [1, 2, 4]

[inputs.verbose]
type = "boolean"
required = false

[inputs.filters]
type = "json"
max_bytes = 4096
default = { labels = ["bug"], closed = false }

[inputs.attachment]
type = "file"
max_bytes = 1048576
required = false

[outputs.summary]
type = "string"
max_length = 500

[outputs.report]
type = "file"
path = "reports/weekly.pdf"
max_bytes = 10485760

[outputs.details]
type = "json"
required = false

[limits]
timeout_s = 120
memory_mb = 256
pids = 32
cpus = 0.5
output_bytes = 2097152
disk_mb = 100

[egress]
allow = ["api.example.com", "*.example.org:8443", "http://plain.example.net", "10.1.2.0/24"]
channels = ["openai"]

[secrets]
names = ["GITHUB_TOKEN", "SLACK_WEBHOOK"]
delivery = "env"

[[triggers]]
kind = "manual"

[[triggers]]
kind = "schedule"
cron = "0 9 * * mon-fri"
timezone = "Europe/Paris"
input = { team = "core" }

[[triggers]]
kind = "schedule"
cron = "*/30 * * * *"
timezone = "UTC"

[[triggers]]
kind = "webhook"
format = "github"

[approvals]
required = false
"#;
    let m = parse_ok(text);
    assert_eq!(
        m.kind,
        WorkerKind::Script {
            runtime: Runtime::Native
        }
    );
    assert_eq!(m.description, "Builds the weekly report.\nSecond line.");
    assert!(m.idempotent);
    assert_eq!(m.secrets.delivery, SecretDelivery::Env);
    assert_eq!(m.triggers.len(), 4);
    assert!(matches!(
        m.triggers[3],
        Trigger::Webhook {
            format: WebhookFormat::Github
        }
    ));
    assert_eq!(
        serde_json::to_value(&m).unwrap(),
        json!({
            "id": "report-2",
            "title": "Weekly report",
            "description": "Builds the weekly report.\nSecond line.",
            "kind": "script",
            "runtime": "native",
            "entry": "bin/report",
            "inputs": {
                "attachment": { "type": "file", "max_bytes": 1048576, "required": false, "description": "" },
                "filters": {
                    "type": "json", "max_bytes": 4096, "required": false,
                    "default": { "labels": ["bug"], "closed": false }, "description": ""
                },
                "team": { "type": "string", "enum": ["core", "web"], "required": true, "description": "Which team" },
                "verbose": { "type": "boolean", "required": false, "description": "" },
                "weeks": { "type": "number", "enum": [1.0, 2.0, 4.0], "required": false, "default": 1, "description": "" }
            },
            "outputs": {
                "details": { "type": "json", "required": false, "description": "" },
                "report": {
                    "type": "file", "max_bytes": 10485760, "required": true,
                    "path": "reports/weekly.pdf", "description": ""
                },
                "summary": { "type": "string", "max_length": 500, "required": true, "description": "" }
            },
            "limits": {
                "timeout_s": 120, "memory_mb": 256, "pids": 32, "cpus": 0.5,
                "output_bytes": 2097152, "disk_mb": 100, "concurrency": 4
            },
            "egress": {
                "allow": ["api.example.com", "*.example.org:8443", "http://plain.example.net", "10.1.2.0/24"],
                "channels": ["openai"]
            },
            "secrets": { "names": ["GITHUB_TOKEN", "SLACK_WEBHOOK"], "delivery": "env" },
            "triggers": [
                { "kind": "manual" },
                { "kind": "schedule", "cron": "0 9 * * mon-fri", "timezone": "Europe/Paris", "input": { "team": "core" } },
                { "kind": "schedule", "cron": "*/30 * * * *", "timezone": "UTC", "input": {} },
                { "kind": "webhook", "format": "github" }
            ],
            "approvals": { "required": false },
            "idempotent": true
        })
    );
}

#[test]
fn run_1_agent_manifest_parses_with_default_budgets() {
    let m = parse_ok(&agent(""));
    let a = m.agent().expect("an agent");
    assert_eq!(a.model, "gpt-4o-mini");
    assert_eq!(
        a.tools.iter().copied().collect::<Vec<_>>(),
        [Tool::ReadFile, Tool::Finish]
    );
    assert_eq!(a.autonomy, Autonomy::AskWrites);
    assert_eq!((a.approval_ttl_s, a.tool_output_bytes), (3600, 16384));
    assert_eq!(
        serde_json::to_value(&a.budgets).unwrap(),
        json!({ "steps": 50, "tool_calls": 100, "tokens": 200000, "cost_usd": 1.0, "wall_time_s": 900, "egress_bytes": 10485760 })
    );
    let all_tools = agent("").replace(
        "[\"read_file\", \"finish\"]",
        "[\"run_command\", \"read_file\", \"write_file\", \"list_files\", \"http_request\", \"request_approval\", \"write_output\", \"finish\"]",
    );
    assert_eq!(parse_ok(&all_tools).agent().unwrap().tools.len(), 8);
    let skill = format!(
        "{}{AGENT_SECTION}",
        worker(
            AGENT_WORKER,
            &[("entry", Some("\"skills/triage/SKILL.md\""))]
        )
    );
    assert!(parse_ok(&skill).agent().is_some());
}

#[test]
fn run_1_positive_controls_for_each_refusal_family() {
    // Each of these sits right next to a refusal above and must pass.
    for text in [
        w(&[("id", Some(&format!("\"{}\"", "a".repeat(63))))]),
        w(&[("id", Some("\"0-starts-with-digit\""))]),
        w(&[("entry", Some("\"src/deep/main.py\""))]),
        script("[inputs.s]\ntype = \"string\"\nmax_length = 3\ndefault = \"abc\"\n"),
        script("[inputs.n]\ntype = \"number\"\nenum = [1, 2.5]\ndefault = 2.5\n"),
        script("[inputs.n]\ntype = \"number\"\nrequired = false\n"),
        script("[limits]\ntimeout_s = 86400\ncpus = 64\nmemory_mb = 65536\n"),
        script("[limits]\ncpus = 2\n"),
        script(
            "[egress]\nallow = [\"*.example.co.uk\", \"api.example.com:8443\", \"http://plain.example.net:8080\"]\n",
        ),
        script("[secrets]\nnames = [\"GITHUB_TOKEN\", \"AIRLOCKED\", \"A\"]\n"),
        script(
            "[inputs.n]\ntype = \"number\"\n[[triggers]]\nkind = \"schedule\"\ncron = \"0 9 * * *\"\ntimezone = \"UTC\"\n",
        ),
        script("[approvals]\nrequired = false\n"),
        script("[approvals]\nrequired = true\nreason = \"spends money\"\nttl_s = 604800\n"),
        agent("[agent.budgets]\nsteps = 10000\ncost_usd = 1000.0\n"),
    ] {
        parse_ok(&text);
    }
}

#[test]
fn run_6_the_trigger_list_says_which_sources_may_start_a_run() {
    use airlock_worker::TriggerKind;
    let none_listed = parse_ok(&script(""));
    assert!(none_listed.declares_trigger(TriggerKind::Manual));
    assert!(!none_listed.declares_trigger(TriggerKind::Webhook));
    let hook_only = parse_ok(&script("[[triggers]]\nkind = \"webhook\"\n"));
    assert!(hook_only.declares_trigger(TriggerKind::Webhook));
    assert!(!hook_only.declares_trigger(TriggerKind::Manual));
    assert!(!hook_only.declares_trigger(TriggerKind::Schedule));
}
