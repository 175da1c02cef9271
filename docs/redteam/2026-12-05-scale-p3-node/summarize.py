import json, sys, statistics as st, collections
rows=[json.loads(l) for l in open(sys.argv[1])]
g=collections.defaultdict(list)
for r in rows: g[(r['target'],r['kind'],r['n'])].append(r)
keys=['idle_cpu_pct','rtt_p50_us','rtt_p99_us','rtt_server_cpu_us_per_rt','churn_per_s','churn_server_cpu_ms','rss_mb']
print("target kind N runs | "+" | ".join(keys))
for k in sorted(g):
    rs=g[k]
    print(*k, len(rs), "|", " | ".join(f"{st.median([r[x] for r in rs]):g} ({'/'.join(str(r[x]) for r in rs)})" for x in keys))
