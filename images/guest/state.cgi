#!/bin/sh
# GET /cgi-bin/state: the guest's boot id and its 100 ms counter (busybox httpd CGI).
printf 'Content-Type: text/plain\r\nCache-Control: no-store\r\n\r\n'
echo "boot_id=$(cat /proc/sys/kernel/random/boot_id) counter=$(cat /run/counter 2>/dev/null || echo 0) uptime=$(cut -d' ' -f1 /proc/uptime)"
