#!/bin/bash
# goodput's Slurm prolog and epilog (docs/deployment.md, "Slurm prolog and epilog").
#
# slurmd runs it as root on every node of every job: as the prolog when the job is allocated
# (PrologFlags=Alloc), as the epilog when the job ends there. It records where the job runs on
# this node -- job id, node, the job's node list, the GPUs Slurm allocated here and, from
# nvidia-smi, their PCI bus ids, UUIDs and serials -- with a fast node check, and POSTs that to
# goodput's push endpoint (/v1/layout). Attribution uses it to find the host and GPU of a rank
# that a log names without its host.
#
# It never fails a job: it always exits 0 (a failing prolog makes Slurm drain the node and
# requeue the job; only goodput's isolation, with its blast-radius guard, decides drains), and it
# never waits long: nvidia-smi gets 3 s (abandoned, not waited for, if it cannot even be killed),
# the POST 2 s. goodput unreachable, unconfigured or refusing the record: one log line, exit 0.
#
# Nothing the job controls is executed or used in a path: only Slurm's own variables are read,
# each checked against a strict pattern (the job's name, comment, working directory and
# environment are never read), and the settings come from a file that root owns and nobody else
# can read or write (default /etc/goodput/prolog.env; GOODPUT_PROLOG_ENV names another), parsed
# line by line, never sourced:
#   GOODPUT_PUSH_URL=http://goodput.example:8787   goodput's push endpoint (push.enabled)
#   GOODPUT_PUSH_TOKEN=...                         one of goodput's push.tokens
#   GOODPUT_CLUSTER=...                            optional: goodput's cluster name, if not the push server's
#   GOODPUT_CA_FILE=/etc/goodput/ca.pem            optional: the CA of an https endpoint
#   NVIDIA_SMI=/usr/bin/nvidia-smi                 optional: else nvidia-smi on /usr/bin:/bin:/usr/sbin:/sbin
#   GOODPUT_NODE_GPUS=8                            optional: the node check expects this many GPUs
#   GOODPUT_SMI_TIMEOUT=3                          optional: seconds nvidia-smi may take (1-10)
# One file serves as prolog and epilog (goodput-epilog.sh is a link to it): SLURM_SCRIPT_CONTEXT,
# or else the name it runs under, says which. Bash 4.2 or later; curl, timeout, stat, mktemp.

TMP=""
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
  if [ -n "$TMP" ]; then rm -rf -- "$TMP"; fi
  exit 0
}
# Whatever happens below (an unset variable, a signal), slurmd sees success.
trap cleanup EXIT
trap 'exit 0' TERM INT HUP
set -u
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH LC_ALL=C
umask 077

SMI_TIMEOUT=3
POST_TIMEOUT=2
CONNECT_TIMEOUT=1
MAX_GPUS=64
SETTINGS=${GOODPUT_PROLOG_ENV:-/etc/goodput/prolog.env}
JOB_ID="?"
NODE="?"

case "${SLURM_SCRIPT_CONTEXT:-}" in
  prolog_slurmd) EVENT=prolog ;;
  epilog_slurmd) EVENT=epilog ;;
  *) case "$0" in *epilog*) EVENT=epilog ;; *) EVENT=prolog ;; esac ;;
esac

log() {
  local line="goodput $EVENT, job $JOB_ID on $NODE: $*"
  line=${line//[^[:print:]]/ }
  printf '%s\n' "${line:0:400}" >&2
  timeout 1 logger -t "goodput-$EVENT" -p daemon.notice -- "${line:0:400}" </dev/null >/dev/null 2>&1
}

# -- settings -------------------------------------------------------------------------------------

URL="" TOKEN="" CLUSTER="" CA_FILE="" SMI="" NODE_GPUS="" SMI_LIMIT=""
read_settings() {
  local file=$1 owner mode line key value n=0
  if [ ! -f "$file" ]; then
    log "no settings in $file: the job's layout is not sent to goodput"
    return 1
  fi
  read -r owner mode < <(stat -L -c '%u %a' -- "$file" 2>/dev/null)
  if [ "${owner:-}" != "$EUID" ] || ! [[ ${mode:-} =~ ^[0-7]{3,4}$ ]] || (( 8#$mode & 8#077 )); then
    log "$file must be owned by uid $EUID and private to it (mode 0600): it holds goodput's push token"
    return 1
  fi
  while IFS= read -r line || [ -n "$line" ]; do
    n=$((n + 1))
    [ "$n" -le 200 ] || break
    line=${line%$'\r'}
    [[ $line =~ ^(export[[:space:]]+)?([A-Z_]+)=(.*)$ ]] || continue
    key=${BASH_REMATCH[2]} value=${BASH_REMATCH[3]}
    if [[ $value =~ ^\"(.*)\"$ ]] || [[ $value =~ ^\'(.*)\'$ ]]; then value=${BASH_REMATCH[1]}; fi
    case "$key" in
      GOODPUT_PUSH_URL) URL=$value ;;
      GOODPUT_PUSH_TOKEN) TOKEN=$value ;;
      GOODPUT_CLUSTER) CLUSTER=$value ;;
      GOODPUT_CA_FILE) CA_FILE=$value ;;
      NVIDIA_SMI) SMI=$value ;;
      GOODPUT_NODE_GPUS) NODE_GPUS=$value ;;
      GOODPUT_SMI_TIMEOUT) SMI_LIMIT=$value ;;
    esac
  done < <(head -c 65536 -- "$file")
  URL=${URL%/}
  if ! [[ $URL =~ ^https?://[][A-Za-z0-9._:-]+(/[A-Za-z0-9._~/-]*)?$ ]]; then
    log "GOODPUT_PUSH_URL in $file is missing or not an http(s) URL"
    return 1
  fi
  if ! [[ $TOKEN =~ ^[A-Za-z0-9._~+/=-]{16,1024}$ ]]; then
    log "GOODPUT_PUSH_TOKEN in $file is missing or not a token (16 or more of A-Z a-z 0-9 . _ ~ + / = -)"
    return 1
  fi
  if [ -n "$CLUSTER" ] && ! [[ $CLUSTER =~ ^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$ ]]; then
    log "GOODPUT_CLUSTER in $file is not a cluster name; using the push server's"
    CLUSTER=""
  fi
  if [ -n "$CA_FILE" ] && ! [[ $CA_FILE =~ ^/[A-Za-z0-9._/-]{1,4095}$ ]]; then
    log "GOODPUT_CA_FILE in $file is not an absolute path; ignored"
    CA_FILE=""
  fi
  if [ -n "$SMI" ] && ! [[ $SMI =~ ^/[A-Za-z0-9._/-]{1,4095}$ ]]; then
    log "NVIDIA_SMI in $file is not an absolute path; ignored"
    SMI=""
  fi
  [[ $NODE_GPUS =~ ^[0-9]{1,4}$ ]] || NODE_GPUS=""
  if [[ $SMI_LIMIT =~ ^([1-9]|10)$ ]]; then SMI_TIMEOUT=$SMI_LIMIT; fi
  return 0
}

# -- Slurm's facts about the job ------------------------------------------------------------------

NODELIST="" RESTARTS=0
read_job() {
  local nodelist_re='^[][A-Za-z0-9_.,-]+$'
  if ! [[ ${SLURM_JOB_ID:-} =~ ^[0-9]{1,10}$ ]]; then
    log "SLURM_JOB_ID is missing or not a job number"
    return 1
  fi
  JOB_ID=$((10#$SLURM_JOB_ID))
  if ! [[ ${SLURMD_NODENAME:-} =~ ^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$ ]]; then
    log "SLURMD_NODENAME is missing or not a node name"
    return 1
  fi
  NODE=$SLURMD_NODENAME
  # Slurm 22.05 gives the prolog SLURM_NODELIST, later releases SLURM_JOB_NODELIST too.
  NODELIST=${SLURM_JOB_NODELIST:-${SLURM_NODELIST:-}}
  if [ "${#NODELIST}" -gt 16384 ] || ! [[ $NODELIST =~ $nodelist_re ]]; then
    log "the job's node list is missing or not a Slurm hostlist"
    return 1
  fi
  if [[ ${SLURM_JOB_RESTART_COUNT:-} =~ ^[0-9]{1,9}$ ]]; then RESTARTS=$((10#$SLURM_JOB_RESTART_COUNT)); fi
  return 0
}

# The GPUs Slurm allocated to the job here, in its order (local rank i uses the i-th).
ALLOCATED=()
read_gpus() {
  local list=${SLURM_JOB_GPUS:-${CUDA_VISIBLE_DEVICES:-}} index
  local -A seen=()
  [[ $list =~ ^[0-9]{1,4}(,[0-9]{1,4}){0,63}$ ]] || return 0
  for index in ${list//,/ }; do
    index=$((10#$index))
    if [ -z "${seen[$index]:-}" ]; then seen[$index]=1; ALLOCATED+=("$index"); fi
  done
}

# -- the node check -------------------------------------------------------------------------------

# Runs a command for at most $1 seconds with its output in $2; a command that cannot even be
# killed (nvidia-smi stuck in the driver) is abandoned, holding none of slurmd's descriptors.
run_bounded() {
  local limit=$1 out=$2 pid ticks=0 fd
  shift 2
  (
    for fd in /proc/"$BASHPID"/fd/*; do
      fd=${fd##*/}
      if [[ $fd =~ ^[0-9]+$ ]] && [ "$fd" -gt 2 ] && [ -e "/proc/$BASHPID/fd/$fd" ]; then exec {fd}>&-; fi
    done
    timeout -k 1 "$limit" "$@"
    exit $?  # not exec'd: this subshell exits, and bash prints no "Killed" when timeout kills itself
  ) </dev/null >"$out" 2>/dev/null &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    ticks=$((ticks + 1))
    [ "$ticks" -le $(((limit + 2) * 10)) ] || return 124
    sleep 0.1
  done
  wait "$pid"
}

declare -A PCI=() UUID=() SERIAL=()
STATUS=skipped DETAIL=""
check_gpus() {
  local rc=0 index pci uuid serial rest listed=0 missing=()
  if [ -z "$SMI" ]; then SMI=$(command -v nvidia-smi || true); fi
  if [ -z "$SMI" ]; then DETAIL="no nvidia-smi on this node"; return; fi
  if [ ! -x "$SMI" ]; then DETAIL="$SMI is not executable"; return; fi
  run_bounded "$SMI_TIMEOUT" "$TMP/smi" "$SMI" --query-gpu=index,pci.bus_id,uuid,serial --format=csv,noheader \
    || rc=$?
  STATUS=failed
  case "$rc" in
    0) ;;
    124|137) DETAIL="nvidia-smi did not answer within $SMI_TIMEOUT s"; return ;;
    *) DETAIL="nvidia-smi failed (exit status $rc)"; return ;;
  esac
  while IFS=, read -r index pci uuid serial rest; do
    index=${index//[[:space:]]/} pci=${pci//[[:space:]]/} uuid=${uuid//[[:space:]]/} serial=${serial//[[:space:]]/}
    if ! [[ $index =~ ^[0-9]{1,4}$ ]] || [ -n "$rest" ]; then continue; fi  # four fields, or not nvidia-smi's
    listed=$((listed + 1))
    [ "$listed" -le 1024 ] || break
    index=$((10#$index))
    if [[ $pci =~ ^[0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{1,2}:[0-9A-Fa-f]{1,2}\.[0-7]$ ]]; then PCI[$index]=$pci; fi
    if [[ $uuid =~ ^(GPU|MIG)-[0-9A-Fa-f-]{8,64}$ ]]; then UUID[$index]=$uuid; fi
    if [[ $serial =~ ^[A-Za-z0-9._-]{1,64}$ ]]; then SERIAL[$index]=$serial; fi
    PCI[$index]=${PCI[$index]:-}
  done < <(head -c 262144 -- "$TMP/smi")
  for index in ${ALLOCATED[@]+"${ALLOCATED[@]}"}; do
    [ -n "${PCI[$index]+set}" ] || missing+=("$index")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    DETAIL="nvidia-smi does not list GPU ${missing[*]:0:8} that Slurm allocated here"
  elif [ -n "$NODE_GPUS" ] && [ "$listed" -ne "$((10#$NODE_GPUS))" ]; then
    DETAIL="nvidia-smi lists $listed GPUs, $((10#$NODE_GPUS)) expected"
  else
    STATUS=ok DETAIL="nvidia-smi lists $listed GPUs"
  fi
}

# -- the record -----------------------------------------------------------------------------------

# Every value below matched a pattern without quotes, backslashes or control characters.
record() {
  local gpus="" entry index
  for index in ${ALLOCATED[@]+"${ALLOCATED[@]:0:$MAX_GPUS}"}; do
    entry="{\"index\":$index"
    if [ -n "${PCI[$index]:-}" ]; then entry+=",\"pci_bus_id\":\"${PCI[$index]}\""; fi
    if [ -n "${UUID[$index]:-}" ]; then entry+=",\"uuid\":\"${UUID[$index]}\""; fi
    if [ -n "${SERIAL[$index]:-}" ]; then entry+=",\"serial\":\"${SERIAL[$index]}\""; fi
    gpus+="${gpus:+,}$entry}"
  done
  printf '{"version":1,"event":"%s",%s"job_id":"%s","restart_count":%d,"node":"%s","nodelist":"%s",' \
    "$EVENT" "${CLUSTER:+\"cluster\":\"$CLUSTER\",}" "$JOB_ID" "$RESTARTS" "$NODE" "$NODELIST"
  printf '"gpus":[%s],"check":{"status":"%s","detail":"%s"}}\n' "$gpus" "$STATUS" "${DETAIL:0:290}"
}

send() {
  local body=$1 answer code said tls=()
  if [ -n "$CA_FILE" ]; then tls=(--cacert "$CA_FILE"); fi
  # The token goes in a config read from a pipe, never on the command line (ps shows that).
  answer=$(timeout -k 1 $((POST_TIMEOUT + 1)) curl --silent --show-error --proto '=http,https' \
    --connect-timeout "$CONNECT_TIMEOUT" --max-time "$POST_TIMEOUT" --max-filesize 65536 ${tls[@]+"${tls[@]}"} \
    --config <(printf 'header = "Authorization: Bearer %s"\n' "$TOKEN") \
    --header 'Content-Type: application/json' --data-binary @- \
    --output "$TMP/answer" --write-out '%{http_code}' "$URL/v1/layout" <<<"$body" 2>&1) || true
  code=${answer: -3}
  if [ "$code" = 200 ]; then return 0; fi
  if [ "$code" = 000 ]; then said=${answer%???}; else said="HTTP $code $(head -c 300 -- "$TMP/answer" 2>/dev/null)"; fi
  log "goodput did not take the layout ($URL/v1/layout: ${said:0:300}); the job runs regardless"
}

main() {
  read_job || return 0
  read_settings "$SETTINGS" || return 0
  TMP=$(mktemp -d 2>/dev/null) || { TMP=""; log "no temporary directory"; return 0; }
  read_gpus
  check_gpus
  send "$(record)"
}

main
exit 0
