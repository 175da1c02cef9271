import os, time, subprocess, urllib.request, re
HZ = os.sysconf("SC_CLK_TCK")
def cpu(pid):
    with open(f"/proc/{pid}/stat") as f:
        s = f.read().rsplit(")", 1)[1].split()
    return (int(s[11]) + int(s[12])) / HZ
def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for l in f:
            if l.startswith("VmRSS"):
                return int(l.split()[1]) / 1024
def hwm_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for l in f:
            if l.startswith("VmHWM"):
                return int(l.split()[1]) / 1024
def fds(pid):
    try: return len(os.listdir(f"/proc/{pid}/fd"))
    except Exception: return -1
def threads(pid):
    with open(f"/proc/{pid}/status") as f:
        for l in f:
            if l.startswith("Threads"):
                return int(l.split()[1])
def wait_line(proc_file, pattern, timeout=10):
    end = time.time() + timeout
    while time.time() < end:
        try:
            txt = open(proc_file).read()
        except FileNotFoundError:
            txt = ""
        m = re.search(pattern, txt)
        if m: return m
        time.sleep(0.05)
    raise TimeoutError(pattern)
def scrape(addr, timeout=2):
    t = time.time()
    try:
        with urllib.request.urlopen(f"http://{addr}/metrics", timeout=timeout) as r:
            body = r.read()
            return True, time.time() - t, body.decode()
    except Exception as e:
        return False, time.time() - t, repr(e)
