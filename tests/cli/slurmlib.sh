# Purpose: a real single-machine Slurm cluster for a test (sourced): Debian's munge and
# slurm-wlm daemons — munged, slurmctld, slurmd — with a configuration, key, state and logs of
# their own under a folder the caller gives, on loopback and free ports. slurm_start FOLDER starts
# them (and exports SLURM_CONF, so sbatch/squeue/scontrol/scancel talk to this cluster alone);
# slurm_stop stops them and removes nothing but what they made; call it from the caller's trap.
# Needs root (slurmd runs jobs as their users; the daemons' files are root's).

slurm_free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

slurm_start() {  # slurm_start FOLDER: 0 when the node is idle and ready for jobs within 60 s
  SLURM_DIR="$1"
  mkdir -p "$SLURM_DIR"/{state,spool,log,munge}
  chmod 700 "$SLURM_DIR/munge"
  dd if=/dev/urandom of="$SLURM_DIR/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$SLURM_DIR/munge/munge.key"
  munged --force --socket="$SLURM_DIR/munge/munge.sock" --key-file="$SLURM_DIR/munge/munge.key" \
    --pid-file="$SLURM_DIR/munge/munged.pid" --log-file="$SLURM_DIR/log/munged.log" \
    --seed-file="$SLURM_DIR/munge/seed" || return 1
  local node ctl_port d_port cpus
  node=$(hostname -s)
  ctl_port=$(slurm_free_port)
  d_port=$(slurm_free_port)
  cpus=$(nproc)
  cat >"$SLURM_DIR/slurm.conf" <<CONF
ClusterName=exprun-test
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctl_port
SlurmdPort=$d_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$SLURM_DIR/munge/munge.sock
CredType=cred/munge
StateSaveLocation=$SLURM_DIR/state
SlurmdSpoolDir=$SLURM_DIR/spool
SlurmctldPidFile=$SLURM_DIR/slurmctld.pid
SlurmdPidFile=$SLURM_DIR/slurmd.pid
SlurmctldLogFile=$SLURM_DIR/log/slurmctld.log
SlurmdLogFile=$SLURM_DIR/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
JobRequeue=1
MinJobAge=600
KillWait=10
SlurmdTimeout=60
InactiveLimit=0
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=1000 State=UNKNOWN
PartitionName=test Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
  export SLURM_CONF="$SLURM_DIR/slurm.conf"
  slurmctld -c -i -f "$SLURM_CONF" || return 1   # -c: a clean state, -i: ignore a stale one
  slurmd -f "$SLURM_CONF" || return 1
  for _ in $(seq 1 120); do
    if sinfo -h -o %T 2>/dev/null | grep -qx idle; then return 0; fi
    sleep 0.5
  done
  echo "slurm: the node did not become idle within 60 s: $(sinfo 2>&1 | tail -2) $(tail -5 "$SLURM_DIR/log/slurmctld.log") $(tail -5 "$SLURM_DIR/log/slurmd.log")" >&2
  return 1
}

slurm_stop() {  # every job cancelled, then the daemons, whatever state they are in
  [[ -n ${SLURM_DIR:-} && -d $SLURM_DIR ]] || return 0
  scancel --quiet --full -u root 2>/dev/null
  local pidfile
  for pidfile in "$SLURM_DIR/slurmd.pid" "$SLURM_DIR/slurmctld.pid" "$SLURM_DIR/munge/munged.pid"; do
    [[ -f $pidfile ]] && kill "$(cat "$pidfile")" 2>/dev/null
  done
  sleep 1
  for pidfile in "$SLURM_DIR/slurmd.pid" "$SLURM_DIR/slurmctld.pid" "$SLURM_DIR/munge/munged.pid"; do
    [[ -f $pidfile ]] && kill -9 "$(cat "$pidfile")" 2>/dev/null
  done
  # jobs' processes slurmd started and left behind (slurmstepd), this cluster's only
  pkill -9 -f "slurmstepd.*$SLURM_DIR" 2>/dev/null
  return 0
}
