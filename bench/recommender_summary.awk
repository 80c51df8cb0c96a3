# "samples/s, AUC" of a recommender job's output (examples/ps_recommender):
# its trainers' samples/s summed, the first trainer's test AUC. Used by
# bench/compare_ps_recommender.sh and bench/ps_failover.sh.
/trained [0-9]+ samples in/ { for (i = 1; i <= NF; i++) if ($(i + 1) ~ /^samples\/s/) rate += $i }
/test AUC/ && !auc { for (i = 1; i <= NF; i++) if ($i == "AUC") auc = $(i + 1) }
END { printf "%.0f samples/s, AUC %s\n", rate, auc }
