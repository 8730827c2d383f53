# Shared by the bench scripts (sourced, not run): the trainer binary, built when missing, and the
# peer leg. Each script measures GATEWAY_BIN, then, with `--peer nginx`, the same with nginx
# (bench/nginx-as-gateway: proxy_pass, one worker, access log on) in the gateway's place, so that
# every figure has the lower bound of a proxy on this rig beside it.

bench_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
trainer="$bench_root/target/release/trainer"

# Builds the trainer (release) unless it is there.
bench_trainer() {
    [ -x "$trainer" ] || cargo build -q --release -p trainer --manifest-path "$bench_root/Cargo.toml"
}

# Splits a script's arguments: GATEWAY_BIN first, `--peer nginx` anywhere, the rest for the
# trainer. Sets `legs` (the binaries to measure, in order) and `rest`.
bench_legs() {
    local gateway=${1:?usage: GATEWAY_BIN [--peer nginx] [trainer args...]}
    shift
    legs=("$gateway")
    rest=()
    while [ $# -gt 0 ]; do
        case $1 in
            --peer)
                [ "${2:-}" = nginx ] || { echo "--peer: only nginx is a peer" >&2; exit 2; }
                legs+=("$bench_root/bench/nginx-as-gateway")
                shift 2
                ;;
            *) rest+=("$1"); shift ;;
        esac
    done
}

# Raises the soft descriptor limit to the hard one: the trainer holds the client side and the
# mock's side of every connection, and the gateway (or nginx), started by it, inherits the limit.
# Fails when the hard limit is below `need`.
bench_fd_limit() {
    local need=$1
    ulimit -n "$(ulimit -Hn)"
    if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt "$need" ]; then
        echo "the descriptor limit is $(ulimit -n), below the $need this run needs (raise the hard limit)" >&2
        exit 1
    fi
}

# The label of a leg in the output.
bench_leg_name() {
    case $1 in
        */nginx-as-gateway) echo "nginx (bench/nginx-as-gateway)" ;;
        *) echo "$1" ;;
    esac
}

# Runs `trainer SUBCOMMAND --gateway LEG` for every leg, with `--shape` for each default shape
# name unless the arguments name shapes of their own, and the rest of the arguments.
bench_run_legs() {
    local subcommand=$1 name
    shift
    local shapes=()
    case " ${rest[*]:-} " in
        *" --shape "*) ;;
        *) for name in "$@"; do shapes+=(--shape "$bench_root/shapes/$name.json"); done ;;
    esac
    local args arg json_next
    for leg in "${legs[@]}"; do
        echo "== $(bench_leg_name "$leg")"
        # The peer leg writes its JSON beside the gateway's: `--json out.json` -> out.nginx.json.
        args=()
        json_next=
        for arg in ${rest[@]+"${rest[@]}"}; do
            if [ -n "$json_next" ] && [ "$leg" != "${legs[0]}" ]; then
                arg="${arg%.json}.nginx.json"
            fi
            json_next=
            [ "$arg" = --json ] && json_next=1
            args+=("$arg")
        done
        "$trainer" "$subcommand" --gateway "$leg" "${shapes[@]}" ${args[@]+"${args[@]}"}
    done
}
