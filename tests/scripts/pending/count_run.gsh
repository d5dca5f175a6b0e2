# mutatee: basic O0
# Counting calls in a live run: add runs twice, factorial ten times, inc once.
count add factorial inc
run > /dev/null
report
